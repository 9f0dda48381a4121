//! [`ServeError`]: why starting a role, or what it needs, failed.
//!
//! A variant that wraps a cause says what was being done and keeps the
//! cause as its `source` (printed after it, `what: cause`, by the CLI's
//! `{:#}`); a transparent one is the lower crate's own error unchanged.

use std::path::PathBuf;

/// Why loading a cohort, opening its stores or starting a role failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The frozen cohort does not load or verify.
    #[error(transparent)]
    Freeze(#[from] cohort_coordinator::freeze::FreezeError),
    /// A ledger call failed (seeding).
    #[error(transparent)]
    Ledger(#[from] cohort_ledger::LedgerError),
    /// The Redis ledger cannot be reached (`url` is redacted).
    #[error("cannot reach the Redis ledger at {url}")]
    RedisLedger {
        url: String,
        #[source]
        source: cohort_ledger::LedgerError,
    },
    /// The embedded ledger cannot be opened.
    #[error("cannot open the ledger {}", path.display())]
    SqliteLedger {
        path: PathBuf,
        #[source]
        source: cohort_ledger::LedgerError,
    },
    /// A directory cannot be created.
    #[error("cannot create {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file cannot be read.
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file cannot be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The artifact store does not open (`url`: what `--artifacts` named).
    #[error("cannot open the artifact store (--artifacts {url})")]
    ArtifactStore {
        url: String,
        #[source]
        source: cohort_artifacts::S3Error,
    },
    /// `cohort.toml` does not validate.
    #[error(transparent)]
    Invalid(#[from] cohort_core::ValidationError),
    /// An arm's adapter cannot be built from its settings.
    #[error(transparent)]
    Adapter(#[from] cohort_worker::adapters::AdapterError),
    /// A worker is asked for an arm the cohort does not have.
    #[error("--arms names {arm:?}, which is not an arm of cohort {cohort:?}")]
    UnknownArm { arm: String, cohort: String },
    /// The judge file (`--judge FILE`) does not load.
    #[error(transparent)]
    JudgeFile(#[from] cohort_worker::score::JudgeFileError),
    /// Source capture cannot be set up.
    #[error("cannot set up source capture")]
    Capture(#[source] cohort_worker::capture::CaptureError),
    /// The inline judging pass cannot be created or opened.
    #[error(transparent)]
    Pass(#[from] cohort_worker::passes::PassError),
    /// The judge proxy's config does not load.
    #[error(transparent)]
    Proxy(#[from] cohort_judge_proxy::error::ProxyError),
    /// An in-process judge proxy's config names no team.
    #[error("{origin}: the judge proxy needs a team")]
    NoTeam { origin: String },
    /// An in-process judge proxy has no judge of the cohort's model.
    #[error("{origin}: no judge with model {model:?} (the cohort's [judge] model)")]
    NoJudgeOfModel { origin: String, model: String },
    /// An in-process judge proxy has several judges and the cohort names none.
    #[error("{origin}: several judges and the cohort names none")]
    SeveralJudges { origin: String },
    /// No randomness for an in-process proxy's team key.
    #[error("cannot read /dev/urandom for the in-process judge proxy's team key")]
    Random(#[source] std::io::Error),
    /// A loopback port cannot be bound.
    #[error("cannot bind a loopback port")]
    Bind(#[source] std::io::Error),
    /// A role's address cannot be listened on.
    #[error("cannot listen on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// The operations server's address cannot be listened on.
    #[error("cannot listen on {address} for the operations endpoints (--ops-listen)")]
    OpsListen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// Metrics cannot be exported as the `OTEL_*` variables ask.
    #[error(transparent)]
    Telemetry(#[from] cohort_telemetry::TelemetryError),
    /// The coordinator's gRPC server failed.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
    /// The worker stopped with an error.
    #[error(transparent)]
    Worker(#[from] cohort_worker::WorkerError),
    /// `cohort judge` on a cohort without `[judge]`.
    #[error(
        "cohort {cohort:?} has no [judge] in cohort.toml: nothing says which judge is frozen for it, so it cannot be \
         judged; freeze a cohort with a [judge] section (see docs/judging.md)"
    )]
    NoJudge { cohort: String },
    /// `cohort judge` without `--judge` on a cohort whose judge is not the sim judge.
    #[error(
        "--judge FILE is required: the cohort's judge ({provider} {model:?}) is reached through a judge proxy; only \
         [judge] provider = \"sim\" is judged in this process without one"
    )]
    JudgeFileRequired { provider: String, model: String },
    /// No embedded ledger where one was expected.
    #[error("no ledger at {}: collect the cohort first (`cohort run`), or name it with --ledger/--redis", path.display())]
    NoLedger { path: PathBuf },
    /// The ledger's runs cannot be read.
    #[error("cannot read the ledger")]
    ReadLedger(#[source] cohort_ledger::LedgerError),
    /// A step of the judging stage failed.
    #[error(transparent)]
    Stage(#[from] cohort_worker::judging::StageError),
    /// The ledger holds nothing of a cohort it held before.
    #[error(
        "the ledger holds nothing of cohort {cohort:?}, but {seeded}, and the cohort holds {evidence}: the ledger \
         lost its data (Redis emptied by FLUSHALL or restarted on an empty data folder, or the ledger file \
         deleted). Seeding it again would reopen the collection window and run every run again, calling the \
         products a second time for runs that have records, so nothing was seeded and nothing run. Rebuild the \
         ledger from that evidence: stop the coordinator and workers, run `cohort ledger rebuild DIR` with the same \
         --redis/--ledger/--artifacts, and start them again; or restore the ledger from its backup (Redis: its \
         RDB/AOF files; the embedded ledger: .cohort/ledger.sqlite) (docs/operations.md, \"A lost ledger\")"
    )]
    LedgerLost { cohort: String, seeded: String, evidence: String },
    /// `cohort ledger rebuild` with an s3:// artifact store.
    #[error(
        "cohort ledger rebuild reads the run records from a local artifact store, and an s3:// bucket cannot be \
         listed from here: copy the bucket's sha256/ folder into DIR/.cohort/artifacts (or a directory named with \
         --artifacts file:///PATH) and rebuild from there"
    )]
    RebuildFromS3,
    /// Another I/O failure, as the operating system says it.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
