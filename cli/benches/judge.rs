//! Benchmark: claims judged per second through `cohort judge` (the real
//! process) against the mock provider (a TEST DOUBLE) behind the real
//! `cohort judge-proxy`, with batching. Prints figures; asserts nothing
//! about speed.
//!
//!     cargo bench -p cohort-cli --bench judge
//!     COHORT_BENCH_QUESTIONS=400 COHORT_BENCH_LATENCY_MS=20 cargo bench -p cohort-cli --bench judge
//!
//! A sim cohort is collected with the judge down (every claim unjudged),
//! then `cohort judge` fills the pass in; the time is the stage's own (its
//! pre-flight included). Round trips per claim: `JudgeClaims` calls the
//! stage made (it prints them) and upstream calls the mock provider
//! answered (`/mock/stats`), each divided by the claims judged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use cohort_tests::SimCohort;

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");
const TEAM_KEY: &str = "team-key-judge-bench-91ab3c";

fn main() {
    let questions: usize = env_or("COHORT_BENCH_QUESTIONS", 200);
    let latency_ms: u64 = env_or("COHORT_BENCH_LATENCY_MS", 0);
    let batch: u32 = env_or("COHORT_BENCH_BATCH", 8);
    let concurrency: usize = env_or("COHORT_BENCH_CONCURRENCY", 4);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, questions, batch);
    let dead = tmp.path().join("dead.toml");
    write_judge_file(&dead, &format!("http://127.0.0.1:{}", cohort_tests::free_port().unwrap()));
    let out = Command::new(COHORT)
        .args(["run", dir.to_str().unwrap(), "--judge", dead.to_str().unwrap(), "--no-capture"])
        .env("BENCH_TEAM_KEY", TEAM_KEY)
        .output()
        .unwrap();
    // The judge is down on purpose: the collection goes on and exits 3
    // (claims left unjudged for `cohort judge` to fill in).
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));

    let mock_bin = cohort_tests::cargo_bin("cohort-mock-provider", "cohort-mock-provider");
    let latency = latency_ms.to_string();
    let (mut mock, mock_line) = spawn(Command::new(mock_bin).args(["--latency-ms", &latency]));
    let mock_addr = after(&mock_line, "listening on ").trim_start_matches("http://").to_owned();
    let config = tmp.path().join("proxy.toml");
    fs::write(
        &config,
        format!(
            "[[upstreams]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"http://{mock_addr}/v1\"\napi_key_env = \"MOCK_KEY\"\n\
             rpm = 600000\ntpm = 1000000000\nmax_concurrency = 64\nburst = 64\n\n\
             [[teams]]\nname = \"eval\"\nkey_env = \"BENCH_TEAM_KEY\"\n\n\
             [[judges]]\nname = \"j\"\nupstream = \"mock\"\nmodel = \"judge-1\"\nbatch_size = {batch}\n"
        ),
    )
    .unwrap();
    let (mut proxy, proxy_line) = spawn(
        Command::new(COHORT)
            .args(["judge-proxy", "--config", config.to_str().unwrap()])
            .args(["--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
            .env("BENCH_TEAM_KEY", TEAM_KEY)
            .env("MOCK_KEY", "sk-mock-bench-0003"),
    );
    let judge = tmp.path().join("judge.toml");
    write_judge_file(&judge, &format!("http://{}", after(&proxy_line, "grpc=")));

    let started = Instant::now();
    let out = Command::new(COHORT)
        .args(["judge", dir.to_str().unwrap(), "--judge", judge.to_str().unwrap()])
        .args(["--concurrency", &concurrency.to_string()])
        .env("BENCH_TEAM_KEY", TEAM_KEY)
        .output()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let sent = number_before(&said, " claims sent in ");
    let calls = number_before(&said, " calls in ");
    let stats = http_get(&mock_addr, "/mock/stats");
    let upstream = json_number(&stats, "\"requests\":");
    let _ = proxy.kill();
    let _ = mock.kill();
    let _ = proxy.wait();
    let _ = mock.wait();
    println!(
        "judge benchmark: {questions} runs, {sent} claims judged in {secs:.2} s = {:.0} claims/s \
         (mock latency {latency_ms} ms, batch {batch}, concurrency {concurrency})",
        sent as f64 / secs
    );
    println!(
        "  round trips per claim: {:.3} JudgeClaims calls to the proxy ({calls}), {:.3} upstream calls ({} incl. the probe)",
        calls as f64 / sent.max(1) as f64,
        (upstream.saturating_sub(1)) as f64 / sent.max(1) as f64,
        upstream
    );
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn write_cohort(dir: &Path, questions: usize, batch: u32) {
    let cohort = SimCohort::new("judge-bench", 3, questions);
    SimCohort { window_hours: Some(24), concurrency: 16, batch_size: Some(batch), ..cohort }.write(dir).unwrap();
}

fn write_judge_file(path: &Path, url: &str) {
    cohort_tests::write_judge_file(path, url, "BENCH_TEAM_KEY", 120).unwrap();
}

/// Spawns a server and returns it with its first stdout line.
fn spawn(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    (child, line.trim().to_owned())
}

fn after(line: &str, marker: &str) -> String {
    let at = line.find(marker).unwrap_or_else(|| panic!("{marker} in {line}")) + marker.len();
    line[at..].split_whitespace().next().unwrap().to_owned()
}

fn number_before(text: &str, marker: &str) -> u64 {
    let at = text.find(marker).unwrap_or_else(|| panic!("{marker} in {text}"));
    text[..at].rsplit(' ').next().unwrap().parse().unwrap()
}

fn json_number(text: &str, key: &str) -> u64 {
    let at = text.find(key).unwrap_or_else(|| panic!("{key} in {text}")) + key.len();
    text[at..].trim_start().chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// A plain HTTP/1.1 GET (the mock's stats), without a client library.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}
