//! What the judge proxy's in-process tests share: a mock provider (the
//! TEST DOUBLE) on a free loopback port, a proxy on two more, a gRPC client
//! with a team key, and claims that carry mock fault markers.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use cohort_judge_proxy::config::build_and_validate;
use cohort_judge_proxy::{Listeners, Proxy, ProxyConfig};
use cohort_mock_provider::{MockCall, MockConfig, MockHandle, MockStats};
use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_client::JudgeClient;
use tokio::net::TcpListener;

pub const UPSTREAM_KEY: &str = "sk-upstream-test-4f1c9a77";
pub const TEAM_A_KEY: &str = "team-a-key-8d2e61b0";
pub const TEAM_B_KEY: &str = "team-b-key-19c4f5e3";

pub fn env(name: &str) -> Option<String> {
    match name {
        "UPSTREAM_KEY" => Some(UPSTREAM_KEY.into()),
        "TEAM_A_KEY" => Some(TEAM_A_KEY.into()),
        "TEAM_B_KEY" => Some(TEAM_B_KEY.into()),
        _ => None,
    }
}

/// A proxy config against `base_url`: upstream `mock` (`kind`), teams `a`
/// and `b` (weight 1 each), judge `j` requesting `model` and pinned to
/// `pinned`. `extra` is appended at the top level (before the tables).
pub fn config(base_url: &str, kind: &str, model: &str, pinned: &str, top: &str, upstream_extra: &str) -> ProxyConfig {
    parse(&config_text(base_url, kind, model, pinned, top, upstream_extra))
}

pub fn parse(text: &str) -> ProxyConfig {
    match build_and_validate(text, "test.toml", Path::new("."), &env) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// The text of [`config`]: upstream limits `rpm = 60000`, `tpm = 100000000`
/// (tests replace them).
pub fn config_text(base_url: &str, kind: &str, model: &str, pinned: &str, top: &str, upstream_extra: &str) -> String {
    format!(
        r#"
{top}

[retry]
max_attempts = 4
initial_backoff_ms = 10
max_backoff_ms = 50
max_total_ms = 10000
attempt_timeout_ms = 2000

[[upstreams]]
name = "mock"
kind = "{kind}"
base_url = "{base_url}"
api_key_env = "UPSTREAM_KEY"
rpm = 60000
tpm = 100000000
served_model_headers = ["x-served-model"]
served_provider_headers = ["x-served-provider"]
forward_headers = ["x-mock-fault"]
{upstream_extra}

[[teams]]
name = "a"
key_env = "TEAM_A_KEY"

[[teams]]
name = "b"
key_env = "TEAM_B_KEY"

[[judges]]
name = "j"
upstream = "mock"
model = "{model}"
served_model = "{pinned}"
batch_size = 4
"#
    )
}

/// A running proxy.
pub struct ProxyHandle {
    pub proxy: Arc<Proxy>,
    pub grpc: String,
    pub http: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ProxyHandle {
    pub async fn start(config: ProxyConfig) -> ProxyHandle {
        let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc_addr = format!("http://{}", grpc.local_addr().unwrap());
        let http_addr = format!("http://{}", http.local_addr().unwrap());
        let proxy = Arc::new(Proxy::new(config).await.unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let p = Arc::clone(&proxy);
        let task = tokio::spawn(async move {
            cohort_judge_proxy::serve(p, Listeners { grpc, http }, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        ProxyHandle { proxy, grpc: grpc_addr, http: http_addr, stop: Some(stop), task }
    }

    pub async fn client(&self) -> JudgeClient<tonic::transport::Channel> {
        JudgeClient::connect(self.grpc.clone()).await.unwrap()
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.abort();
    }
}

pub async fn mock(config: MockConfig) -> MockHandle {
    MockHandle::start(config).await.unwrap()
}

/// A claim whose evidence supports it (the mock says YES) or not (NO),
/// with an optional fault marker.
pub fn claim(id: &str, supported: bool, marker: &str) -> pb::Claim {
    let text = format!("Claim text {id} holds {marker}");
    let evidence =
        if supported { format!("We know that claim text {id} holds.") } else { "Unrelated text.".to_owned() };
    pb::Claim {
        claim_id: id.to_owned(),
        text,
        snippets: vec![pb::Snippet { index: 1, source_url: format!("https://example.org/{id}"), text: evidence }],
        cited_indices: vec![1],
    }
}

pub fn request(judge: &str, claims: Vec<pb::Claim>) -> tonic::Request<pb::JudgeRequest> {
    with_key(
        pb::JudgeRequest {
            judge: judge.into(),
            claims,
            deadline_ms: 20_000,
            query_id: "q1".into(),
            system: "sys".into(),
        },
        TEAM_A_KEY,
    )
}

pub fn with_key<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

pub fn classes(resp: &pb::JudgeResponse) -> Vec<pb::AttemptClass> {
    resp.attempts.iter().map(|a| a.class()).collect()
}

/// (YES, NO, unjudged) counts of a response.
pub fn tally(resp: &pb::JudgeResponse) -> (usize, usize, usize) {
    let count = |v: pb::Verdict| resp.verdicts.iter().filter(|c| c.verdict() == v).count();
    (count(pb::Verdict::Yes), count(pb::Verdict::No), count(pb::Verdict::Unjudged))
}

pub async fn mock_stats(mock: &MockHandle) -> MockStats {
    reqwest::get(format!("http://{}/mock/stats", mock.addr)).await.unwrap().json().await.unwrap()
}

pub async fn mock_calls(mock: &MockHandle) -> Vec<MockCall> {
    reqwest::get(format!("http://{}/mock/calls", mock.addr)).await.unwrap().json().await.unwrap()
}
