//! What the judge proxy's cross-process tests share: the mock provider
//! binary (a TEST DOUBLE) and `cohort judge-proxy` processes on free
//! loopback ports, killed on drop, with their logs in files.

#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use cohort_tests::cargo_bin;

/// A child process killed on drop.
pub struct Proc {
    child: Child,
    /// Kept open so the process never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    /// The first line it printed.
    pub first_line: String,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Runs `program` with `args` and `envs`, stderr to `log`, and waits for
    /// its first stdout line (where it says it listens).
    pub fn spawn(program: &Path, args: &[&str], envs: &[(&str, &str)], log: PathBuf) -> Proc {
        let err = File::create(&log).unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(err));
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first_line = String::new();
        stdout.read_line(&mut first_line).unwrap();
        if first_line.is_empty() {
            let _ = child.kill();
            panic!(
                "{} printed nothing; its log:\n{}",
                program.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        Proc { child, _stdout: stdout, first_line: first_line.trim().to_owned(), log }
    }

    /// The `http://...` URL in the first line.
    pub fn url_after(&self, marker: &str) -> String {
        let start =
            self.first_line.find(marker).unwrap_or_else(|| panic!("{marker} in {}", self.first_line)) + marker.len();
        self.first_line[start..].split_whitespace().next().unwrap().to_owned()
    }

    /// Stops it as an operator would (SIGTERM: a graceful shutdown that
    /// flushes what it batched) and waits for it to exit; its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        self.child.wait().ok().and_then(|s| s.code())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The mock provider with `args`; returns it and its base URL (`.../v1`).
pub fn mock(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Proc, String) {
    let bin = cargo_bin("cohort-mock-provider", "cohort-mock-provider");
    let p = Proc::spawn(&bin, args, envs, dir.join("mock.log"));
    let url = format!("{}/v1", p.url_after("listening on "));
    (p, url)
}

/// `cohort judge-proxy --config CONFIG` on free ports; returns it with its
/// gRPC and HTTP URLs.
pub fn proxy(config: &Path, envs: &[(&str, &str)], log: PathBuf) -> (Proc, String, String) {
    let bin = cargo_bin("cohort-cli", "cohort");
    let config = config.to_string_lossy().into_owned();
    let args = ["judge-proxy", "--config", &config, "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"];
    let p = Proc::spawn(&bin, &args, envs, log);
    let grpc = format!("http://{}", p.url_after("grpc="));
    let http = format!("http://{}", p.url_after("http="));
    (p, grpc, http)
}

/// A judge behind `cohort judge-proxy`: the mock provider (a TEST DOUBLE)
/// with `mock_args`, as the upstream `mock` keyed by `mock_key`; one team
/// whose key is `team.1` in the variable `team.0`; one judge `j` requesting
/// `judge-1` with `batch_size = 4`, plus the lines `judge_extra`, after the
/// top-level config `proxy_extra` (a `[retry]` table). Returns both
/// processes, the proxy's gRPC URL and the mock's base URL (without `/v1`).
pub fn mock_judge(
    dir: &Path,
    mock_args: &[&str],
    team: (&str, &str),
    mock_key: &str,
    judge_extra: &str,
    proxy_extra: &str,
) -> (Proc, Proc, String, String) {
    mock_judge_env(dir, mock_args, team, mock_key, judge_extra, proxy_extra, &[])
}

/// [`mock_judge`] with more environment variables for the proxy (the
/// `OTEL_*` of a tracing test).
pub fn mock_judge_env(
    dir: &Path,
    mock_args: &[&str],
    team: (&str, &str),
    mock_key: &str,
    judge_extra: &str,
    proxy_extra: &str,
    envs: &[(&str, &str)],
) -> (Proc, Proc, String, String) {
    let (mock_proc, mock_url) = mock(dir, mock_args, &[]);
    let config = dir.join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "{proxy_extra}[[upstreams]]\nname = \"mock\"\nkind = \"openai\"\nbase_url = \"{mock_url}\"\napi_key_env = \"MOCK_KEY\"\nrpm = 60000\ntpm = 100000000\n\n\
             [[teams]]\nname = \"eval\"\nkey_env = \"{}\"\n\n\
             [[judges]]\nname = \"j\"\nupstream = \"mock\"\nmodel = \"judge-1\"\nbatch_size = 4\n{judge_extra}",
            team.0
        ),
    )
    .unwrap();
    let mut proxy_envs = vec![team, ("MOCK_KEY", mock_key)];
    proxy_envs.extend_from_slice(envs);
    let (proxy_proc, grpc, _http) = proxy(&config, &proxy_envs, dir.join("proxy.log"));
    (mock_proc, proxy_proc, grpc, mock_url.trim_end_matches("/v1").to_owned())
}

/// An open-loop arrival schedule: one arrival per `interval` for `run`,
/// each jittered within its interval by a fixed xorshift sequence from
/// `seed` (strictly periodic arrivals resonate with the limiter's slots and
/// always favour one sender). Each arrival is (offset from the start, the
/// sequence's bits there, for the caller's own choices).
#[allow(dead_code)] // Not every test binary that shares this module loads.
pub fn jittered_arrivals(
    seed: u64,
    interval: std::time::Duration,
    run: std::time::Duration,
) -> Vec<(std::time::Duration, u64)> {
    let mut x = seed;
    let mut out = Vec::new();
    for k in 0u32.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = interval * k + interval.mul_f64((x % 1000) as f64 / 1000.0);
        if at >= run {
            break;
        }
        out.push((at, x));
    }
    out
}
