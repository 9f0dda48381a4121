//! A judge proxy in this process (`cohort run`, `cohort judge`): the
//! built-in SIMULATED judge of a cohort whose `[judge] provider` is "sim",
//! or a config file's, on loopback ports.

use std::time::Duration;

use cohort_judge_proxy::error::ProxyError;
use cohort_worker::score::JudgeEndpoint;

use crate::{Frozen, ServeError};

/// The `[judge] provider` that names the judge proxy's SIMULATED judge.
pub const SIM_JUDGE_PROVIDER: &str = "sim";

/// A judge proxy to start in this process.
#[derive(Debug)]
pub struct InProcessJudge {
    pub config: cohort_judge_proxy::ProxyConfig,
    /// Where its config came from, for messages.
    pub origin: String,
    pub simulated: bool,
}

/// The built-in SIMULATED judge when the cohort's `[judge] provider` is
/// "sim" (else `None`): the proxy's sim upstream, named after the frozen
/// `[judge] model`, behind a fresh team key.
pub fn builtin_sim_judge(cohort: &cohort_core::config::CohortConfig) -> Result<Option<InProcessJudge>, ServeError> {
    let Some(judge) = cohort.judge.as_ref().filter(|j| j.provider == SIM_JUDGE_PROVIDER) else {
        return Ok(None);
    };
    let sim = cohort_judge_proxy::config::BuiltinSimJudge {
        name: judge.model.clone(),
        model: judge.model.clone(),
        served_model: judge.served_model.clone(),
        batch_size: judge.batch_size,
        // The cohort's catalog prices the sim judge only if it lists the
        // model (normally not: cost unknown, never invented).
        prices: cohort.prices.clone(),
    };
    let key = cohort_judge_proxy::secret::Secret::new(random_team_key()?);
    let config = cohort_judge_proxy::ProxyConfig::builtin_sim(sim, key);
    Ok(Some(InProcessJudge { config, origin: "the built-in sim judge".to_owned(), simulated: true }))
}

/// A fresh team key for a proxy that lives and dies with this process and
/// listens on loopback only: 32 random bytes, hex.
fn random_team_key() -> Result<String, ServeError> {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).map_err(ServeError::Random)?;
    Ok(hex::encode(bytes))
}

/// The task of a judge proxy started in this process: it ends when its
/// shutdown future resolves.
pub type ProxyTask = tokio::task::JoinHandle<Result<(), ProxyError>>;

/// Starts the judge proxy of `config` (from `origin`) on loopback ports, in
/// this process, and says how workers reach it: its first team's key, and
/// the judge whose model is the cohort's `[judge] model` (or the only
/// judge).
pub async fn start_judge_proxy(
    config: cohort_judge_proxy::ProxyConfig,
    origin: &str,
    frozen: &Frozen,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(JudgeEndpoint, ProxyTask), ServeError> {
    let team = config.teams.first().ok_or_else(|| ServeError::NoTeam { origin: origin.to_owned() })?;
    let wanted = frozen.cohort.config.judge.as_ref().map(|j| j.model.as_str());
    let judge = match (wanted, config.judges.as_slice()) {
        (_, [only]) => only,
        (Some(model), judges) => judges
            .iter()
            .find(|j| j.model == model)
            .ok_or_else(|| ServeError::NoJudgeOfModel { origin: origin.to_owned(), model: model.to_owned() })?,
        (None, _) => return Err(ServeError::SeveralJudges { origin: origin.to_owned() }),
    };
    let endpoint_parts = (judge.name.clone(), team.key.expose().to_owned());
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(ServeError::Bind)?;
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(ServeError::Bind)?;
    let url = format!("http://{}", grpc.local_addr()?);
    let listeners = cohort_judge_proxy::Listeners { grpc, http };
    let task = tokio::spawn(cohort_judge_proxy::run(config, listeners, shutdown));
    let endpoint = JudgeEndpoint::new(url, endpoint_parts.0, endpoint_parts.1, Duration::from_secs(300));
    Ok((endpoint, task))
}
