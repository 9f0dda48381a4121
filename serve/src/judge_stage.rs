//! `cohort judge`'s stage opened: the frozen judge, the judge proxy (a
//! `--judge` file's, or the built-in SIMULATED judge started in this
//! process), the pass (refused before anything is sent when an existing
//! one has another configuration), the ledger's completed runs in planned
//! order, the judge's pre-flight, the artifact store and the capturer.
//! What [`cohort_worker::judging::judge_runs`] then runs.
//!
//! Every error here is a refusal: nothing was sent to a judge and nothing
//! was written.

use std::path::Path;
use std::sync::Arc;

use cohort_core::config::JudgeConfig;
use cohort_core::taxonomy::Outcome;
use cohort_proto::v1 as pb;
use cohort_worker::capture::{CaptureConfig, SourceCapturer};
use cohort_worker::judging::{self, Stage};
use cohort_worker::passes::PassStore;
use cohort_worker::score::JudgeEndpoint;

use crate::local::{self, StoreConfig};
use crate::{Frozen, ServeError};

/// What `cohort judge` was asked.
#[derive(Debug, Clone, Copy)]
pub struct JudgeStageConfig<'a> {
    /// The pass verdicts go into.
    pub pass: &'a str,
    /// The judge proxy file (`--judge`); `None`: the built-in sim judge.
    pub judge_file: Option<&'a Path>,
    /// Fetch the sources collection never captured.
    pub capture: bool,
    /// Let capture reach loopback and private addresses (tests).
    pub capture_private_addresses: bool,
}

/// The stage, ready to judge.
#[derive(Debug)]
pub struct OpenedStage {
    pub stage: Stage,
    /// The completed, stored runs (run id, record hash), in planned order.
    pub runs: Vec<(String, String)>,
    /// The cohort's frozen `[judge]`.
    pub frozen_judge: JudgeConfig,
    /// What the judge proxy said of its judge at the pre-flight.
    pub described: pb::DescribeJudgeResponse,
    /// The built-in SIMULATED judge runs in this process (stopped when
    /// this value is dropped).
    pub simulated_in_process: bool,
    _stop_proxy: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Opens the judging stage of the cohort `frozen`, or refuses.
pub async fn open_judge_stage(
    frozen: &Frozen,
    store: &StoreConfig,
    asked: JudgeStageConfig<'_>,
) -> Result<OpenedStage, ServeError> {
    let config = &frozen.cohort.config;
    let Some(frozen_judge) = config.judge.clone() else {
        return Err(ServeError::NoJudge { cohort: config.name.clone() });
    };
    let (endpoint, stop_proxy) = match asked.judge_file {
        Some(file) => (JudgeEndpoint::from_file(file)?, None),
        None => {
            let Some(proxy) = crate::judge::builtin_sim_judge(config)? else {
                return Err(ServeError::JudgeFileRequired {
                    provider: frozen_judge.provider.clone(),
                    model: frozen_judge.model.clone(),
                });
            };
            let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let stopped = async move {
                let _ = stop_rx.await;
            };
            let (endpoint, _task) =
                crate::judge::start_judge_proxy(proxy.config, &proxy.origin, frozen, stopped).await?;
            (endpoint, Some(stop))
        }
    };
    let pass_config = judging::judge_pass_config(asked.pass, &endpoint, &frozen_judge);
    // An existing pass of another configuration is refused now, before
    // anything is sent.
    judging::check_pass_config(&frozen.dir, &pass_config)?;
    if store.redis.is_none() {
        let ledger = store.sqlite_path(&frozen.dir);
        if !ledger.exists() {
            return Err(ServeError::NoLedger { path: ledger });
        }
    }
    let ledger = local::open_ledger(frozen, store).await?;
    let mut rows = ledger.runs().await.map_err(ServeError::ReadLedger)?;
    rows.sort_by_key(|r| r.position);
    let runs = rows
        .into_iter()
        .filter(|r| r.outcome == Some(Outcome::Completed) && !r.record_sha256.is_empty())
        .map(|r| (r.run_id, r.record_sha256))
        .collect();

    let described = judging::preflight(&endpoint, &frozen_judge).await.map_err(|f| f.error)?;

    // Before the pass is made: a store that cannot be opened writes nothing.
    let artifacts = local::artifact_store(frozen, store)?;
    let pass = Arc::new(PassStore::create_or_open(&frozen.dir, pass_config)?);
    let capturer = if asked.capture {
        let config =
            CaptureConfig { allow_private_addresses: asked.capture_private_addresses, ..CaptureConfig::default() };
        Some(Arc::new(SourceCapturer::new(config, artifacts.clone()).map_err(ServeError::Capture)?))
    } else {
        None
    };
    let stage = Stage {
        pass,
        artifacts,
        endpoint: Arc::new(endpoint),
        expected_served: Arc::new(frozen_judge.served_model.clone()),
        batch: usize::try_from(frozen_judge.batch_size).unwrap_or(1).max(1),
        capturer,
    };
    Ok(OpenedStage {
        stage,
        runs,
        frozen_judge,
        described,
        simulated_in_process: stop_proxy.is_some(),
        _stop_proxy: stop_proxy,
    })
}
