//! Keys never leak. A `cohort judge-proxy` whose provider rejects its key
//! with an error body that echoes the key back (as real providers do),
//! driven through both front doors with debug logging on, and callers that
//! present near-miss team keys; and a second provider that accepts the key
//! but echoes it in its 200 bodies, plainly, base64-encoded (the whole
//! `Bearer KEY`, or the key URL-safe unpadded) or masked (`sk-live****9b7d`).
//! Proves: neither the provider keys nor any team key appear in the proxy's
//! logs, its error replies, its 200 bodies, its gRPC attempt details, or the
//! output of a config that fails validation, in any of those forms.

// Test code: a failed step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod judge_proxy_support;

use cohort_proto::v1 as pb;
use cohort_proto::v1::judge_client::JudgeClient;
use judge_proxy_support::{mock, proxy};
use serde_json::json;

const PROVIDER_KEY: &str = "sk-live-provider-5e1f0c3a9b7d";
const TEAM_KEY: &str = "team-secret-key-a93b17e0c2";
const OTHER_TEAM_KEY: &str = "team-secret-key-44d0e8b1f5";
const ECHO_KEY: &str = "sk-live-echoed-7a2c94e1d05f";

/// Base64 written out here, independently of the proxy's scrubber.
fn b64(bytes: &[u8], url_safe: bool, pad: bool) -> String {
    let alphabet: &[u8] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// See the module doc.
#[test]
fn keys_never_appear_in_logs_errors_or_responses() {
    let dir = tempfile::tempdir().unwrap();
    // The mock expects another key: every call fails with a 401 whose body
    // says "Incorrect API key provided: <the key it was sent>".
    let (_mock, mock_url) =
        mock(dir.path(), &["--api-key-env", "MOCK_EXPECTED_KEY"], &[("MOCK_EXPECTED_KEY", "sk-the-right-one-000000")]);
    // A second provider that takes its key and echoes it back in 200s.
    let echo_dir = tempfile::tempdir().unwrap();
    let (_echo_mock, echo_url) = mock(echo_dir.path(), &[], &[]);
    let key_file = dir.path().join("provider.key");
    std::fs::write(&key_file, format!("{PROVIDER_KEY}\n")).unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[retry]
max_attempts = 2
initial_backoff_ms = 10
max_backoff_ms = 20

[[upstreams]]
name = "mock"
kind = "openai"
base_url = "{mock_url}"
api_key_file = "provider.key"
rpm = 6000
tpm = 10000000

[[upstreams]]
name = "echo"
kind = "openai"
base_url = "{echo_url}"
api_key_env = "ECHO_KEY"
rpm = 6000
tpm = 10000000

[[teams]]
name = "a"
key_env = "TEAM_KEY"

[[teams]]
name = "b"
key_env = "OTHER_TEAM_KEY"

[[judges]]
name = "j"
upstream = "mock"
model = "judge-1"
"#
        ),
    )
    .unwrap();
    let envs =
        [("TEAM_KEY", TEAM_KEY), ("OTHER_TEAM_KEY", OTHER_TEAM_KEY), ("ECHO_KEY", ECHO_KEY), ("RUST_LOG", "debug")];
    let (proxy_proc, grpc, http) = proxy(&config, &envs, dir.path().join("proxy.log"));

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut seen = Vec::new();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let body = json!({"model": "j", "messages": [{"role": "user", "content": "hi"}]});
        // The right team key: the provider refuses the proxy's key.
        let r =
            client.post(format!("{http}/v1/chat/completions")).bearer_auth(TEAM_KEY).json(&body).send().await.unwrap();
        // The proxy's own key is wrong, not the caller's request: an
        // auth_error upstream is a configuration error of the proxy, 502.
        assert_eq!(r.status(), 502, "the upstream's 401 is the proxy's auth_error");
        seen.push(format!("{:?}", r.headers()));
        let text = r.text().await.unwrap();
        assert!(text.contains("[redacted]"), "the echoed key was scrubbed: {text}");
        seen.push(text);
        // A provider's 200 that echoes the key, in every form the mock has.
        for form in ["plain", "b64", "b64url", "masked"] {
            let echo = json!({"model": "echo/judge-1",
                "messages": [{"role": "user", "content": format!("hi [[mock:echo_key;form={form}]]")}]});
            let r = client
                .post(format!("{http}/v1/chat/completions"))
                .bearer_auth(TEAM_KEY)
                .json(&echo)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{form}");
            let text = r.text().await.unwrap();
            let body: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(body["choices"][0]["message"]["content"], "mock: the key I was sent is [redacted]", "{form}");
            seen.push(text);
        }
        // Near misses of a team key.
        for guess in [&TEAM_KEY[..TEAM_KEY.len() - 1], &format!("{TEAM_KEY}x"), PROVIDER_KEY] {
            let r =
                client.post(format!("{http}/v1/chat/completions")).bearer_auth(guess).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 401);
            seen.push(r.text().await.unwrap());
        }
        // gRPC: the attempt details of a failing judge call.
        let mut judge = JudgeClient::connect(grpc).await.unwrap();
        let claim = pb::Claim {
            claim_id: "c1".into(),
            text: "x".into(),
            snippets: vec![pb::Snippet { index: 1, source_url: "https://e.org".into(), text: "x".into() }],
            cited_indices: vec![1],
        };
        let mut request =
            tonic::Request::new(pb::JudgeRequest { judge: "j".into(), claims: vec![claim], ..Default::default() });
        request.metadata_mut().insert("authorization", format!("Bearer {OTHER_TEAM_KEY}").parse().unwrap());
        let resp = judge.judge_claims(request).await.unwrap().into_inner();
        assert_eq!(resp.attempts[0].class(), pb::AttemptClass::AuthError, "the upstream refused the proxy's key");
        assert!(resp.attempts[0].detail.contains("[redacted]"), "{:?}", resp.attempts[0]);
        seen.push(format!("{resp:?}"));
        let mut bad = tonic::Request::new(pb::JudgeRequest { judge: "j".into(), ..Default::default() });
        bad.metadata_mut().insert("authorization", format!("Bearer {TEAM_KEY}0").parse().unwrap());
        seen.push(format!("{:?}", judge.judge_claims(bad).await.unwrap_err()));
    });
    let log = proxy_proc.log_text();
    drop(proxy_proc);

    // A config that fails validation (a team key too short, a duplicate
    // key) prints its problems, not the keys.
    let bad_config = dir.path().join("bad.toml");
    std::fs::write(&bad_config, std::fs::read_to_string(&config).unwrap().replace("OTHER_TEAM_KEY", "TEAM_KEY"))
        .unwrap();
    let out = std::process::Command::new(cohort_tests::cargo_bin("cohort-cli", "cohort"))
        .args(["judge-proxy", "--config", &bad_config.to_string_lossy()])
        .envs(envs)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let config_error = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(config_error.contains("same key"), "{config_error}");
    seen.push(config_error);

    assert!(log.contains("upstream attempt") && log.contains("auth_error"), "the log covers the failure:\n{log}");
    assert!(log.contains("DEBUG"), "debug logging was on:\n{log}");
    seen.push(log);
    let everything = seen.join("\n");
    for key in [PROVIDER_KEY, TEAM_KEY, OTHER_TEAM_KEY, ECHO_KEY] {
        assert!(!everything.contains(key), "a key leaked");
        // Not even most of it.
        assert!(!everything.contains(&key[..key.len() - 4]), "most of a key leaked");
        let bearer = format!("Bearer {key}");
        for url_safe in [false, true] {
            // The stable middle of an encoding (the first and last groups
            // depend on padding and neighbours).
            for encoded in [b64(key.as_bytes(), url_safe, false), b64(bearer.as_bytes(), url_safe, true)] {
                assert!(!everything.contains(&encoded[4..encoded.len() - 4]), "a base64 form of a key leaked");
            }
        }
        let masked = format!("{}****{}", &key[..7], &key[key.len() - 4..]);
        assert!(!everything.contains(&masked), "a masked form of a key leaked");
    }
    println!("checked {} bytes of logs, errors and responses: no key", everything.len());
}
