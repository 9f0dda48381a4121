//! `cohort-mock-provider`: a TEST DOUBLE of an LLM provider (OpenAI chat
//! completions and Anthropic messages) for cohort's tests and benchmarks.
//! Never point a real cohort at it. See the library docs for the faults.
//!
//! Prints `listening on http://ADDR` on stdout once it accepts connections
//! (with `--listen 127.0.0.1:0` the port is chosen by the system).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use cohort_mock_provider::{AliasConfig, MockConfig};

/// TEST DOUBLE: a mock LLM provider with deterministic verdicts and fault
/// injection. Not a provider.
#[derive(Debug, Parser)]
#[command(name = "cohort-mock-provider", version)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// A TOML config (the flags below override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Requests per minute to enforce (429 beyond it).
    #[arg(long)]
    rpm: Option<u32>,
    /// Requests that may arrive back to back under --rpm.
    #[arg(long)]
    burst: Option<u32>,
    /// The environment variable holding the key callers must present.
    #[arg(long)]
    api_key_env: Option<String>,
    /// A fault SPEC for requests that carry none.
    #[arg(long)]
    fault: Option<String>,
    /// Latency added to every answer.
    #[arg(long)]
    latency_ms: Option<u64>,
    /// Send x-served-model / x-served-provider headers.
    #[arg(long)]
    router_headers: bool,
    /// With --rpm: send OpenAI's x-ratelimit-*-requests headers.
    #[arg(long)]
    ratelimit_headers: bool,
    /// An alias resolving per call: NAME=MODEL_A,MODEL_B,EVERY.
    #[arg(long)]
    alias: Vec<String>,
}

fn config(args: &Args) -> Result<MockConfig, String> {
    let mut c = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => MockConfig::default(),
    };
    c.rpm = args.rpm.or(c.rpm);
    c.burst = args.burst.or(c.burst);
    c.fault = args.fault.clone().or(c.fault);
    c.latency_ms = args.latency_ms.unwrap_or(c.latency_ms);
    c.router_headers |= args.router_headers;
    c.ratelimit_headers |= args.ratelimit_headers;
    if let Some(var) = &args.api_key_env {
        c.api_key = Some(std::env::var(var).map_err(|_| format!("the environment variable {var} is not set"))?);
    }
    for a in &args.alias {
        let bad = || format!("--alias {a}: use NAME=MODEL_A,MODEL_B,EVERY");
        let (name, rest) = a.split_once('=').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split(',').collect();
        let [m1, m2, every] = parts.as_slice() else { return Err(bad()) };
        let every = every.parse().map_err(|_| bad())?;
        c.aliases.push(AliasConfig { name: name.into(), models: vec![(*m1).into(), (*m2).into()], every });
    }
    Ok(c)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::bind(&args.listen).await.map_err(|e| format!("{}: {e}", args.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("cohort-mock-provider (TEST DOUBLE) listening on http://{addr}");
        let _ = std::io::stdout().flush();
        cohort_mock_provider::run(config, listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
