//! Benchmark: run lifecycles per second (lease to final result) through
//! the coordinator and the Redis ledger, with 50 simulated workers over
//! loopback gRPC. Prints figures; asserts nothing about speed.
//!
//!     cargo bench -p cohort-cli --bench lifecycle            # 10k and 1M runs
//!     COHORT_BENCH_SIZES=10000 cargo bench -p cohort-cli --bench lifecycle
//!
//! Seeding is timed first, on its own: `cohort seed` writes the plan to a
//! private `redis-server` (the time to read and verify the frozen cohort is
//! printed apart from the ledger's writes). The coordinator is then the
//! real `cohort coordinator` process on that `redis-server`. The 50 workers are load generators in this process: each
//! leases a batch and reports every run completed at once, in one
//! `ReportResults` call as the real worker's reporter does when busy (a
//! zero-latency simulated system, no artifact writes), so the figure is the
//! control plane's: coordinator + ledger. Redis round trips are counted by the
//! ledger and printed by the coordinator when it stops; RSS is read from
//! /proc for the coordinator process.
//!
//! Each size runs twice, to show what durable acknowledgements cost
//! (ARCHITECTURE.md, "Durable acknowledgements"): with durability off
//! (Redis without an AOF, `--journal off`, no worker journal) and on (Redis
//! with `appendfsync everysec`, the coordinator's `--journal auto`, and
//! every load generator writing and syncing each report batch to a real
//! `cohort_worker::journal::Journal` before it sends it, forgetting what
//! the answers say is durable, as the real worker does). The ledger's
//! restart guard runs in both.
//!
//! A fourth run per size puts the ledger on a Redis Cluster (3 masters, a
//! replica each, `redis+cluster://`, `cohort_tests::RedisCluster`), beside
//! the single server: the coordinator's `--journal auto` turns journals on
//! there (a promoted replica may lack acknowledged writes, so nothing is
//! ever known durable) and the load generators journal as on a durable
//! single server.
//!
//! A third run per size, durability off, exports the coordinator's spans
//! (a lease span and a result span per run, the cohort span) over
//! OTLP/gRPC to a receiver in this process (`cohort_tests::otlp`), to show
//! what tracing costs beside the same configuration without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cohort_proto::v1 as pb;
use cohort_proto::v1::coordinator_client::CoordinatorClient;
use cohort_tests::{RedisCluster, RedisServer};
use cohort_worker::journal::{Ack, Entry, Journal};

const COHORT: &str = env!("CARGO_BIN_EXE_cohort");
const WORKERS: usize = 50;
const ARMS: usize = 10;
const LEASE_BATCH: u32 = 32;

fn main() {
    let sizes: Vec<usize> = std::env::var("COHORT_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 1_000_000]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!(
        "lifecycle benchmark: {WORKERS} load-generating workers, lease batch {LEASE_BATCH}, Redis ledger, loopback gRPC"
    );
    // Traces are exported (to an OTLP/gRPC receiver in this process) in a
    // third configuration, durability off, to show what tracing costs.
    let receiver = runtime.block_on(cohort_tests::otlp::Receiver::start());
    for runs in sizes {
        for (store, traced) in
            [(Store::Single, false), (Store::SingleEverysec, false), (Store::Single, true), (Store::Cluster, false)]
        {
            runtime.block_on(bench(runs, store, traced.then_some(&receiver)));
        }
    }
}

/// Where the ledger lives in one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// One redis-server without an AOF; durability off, no journals.
    Single,
    /// One redis-server with `appendfsync everysec`; journals on.
    SingleEverysec,
    /// A 3-master Redis Cluster with a replica each; journals on (every
    /// report stays journalled until the cohort ends).
    Cluster,
}

/// The running ledger store of one configuration, stopped on drop.
enum Running {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl Running {
    fn url(&self) -> String {
        match self {
            Running::Server(s) => s.url(),
            Running::Cluster(c) => c.url(),
        }
    }
}

async fn bench(runs: usize, store: Store, traced: Option<&cohort_tests::otlp::Receiver>) {
    let durable = store != Store::Single;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cohort");
    write_cohort(&dir, runs / ARMS);
    let frozen = Command::new(COHORT).arg("freeze").arg(&dir).arg("--show").arg("0").output().unwrap();
    assert!(frozen.status.success(), "{}", String::from_utf8_lossy(&frozen.stderr));
    let redis = match store {
        Store::Single => Running::Server(RedisServer::start().unwrap()),
        Store::SingleEverysec => Running::Server(RedisServer::start_everysec().unwrap()),
        Store::Cluster => Running::Cluster(RedisCluster::start(3, 1).unwrap()),
    };
    let journals = tmp.path().join("journals");

    // Seeding, timed on its own: `cohort seed` as the coordinator runs it
    // (read and verify the frozen cohort, then write the plan to Redis).
    // A second `cohort seed` finds the ledger seeded, so its time is the
    // reading and verifying alone; the rest of the first is the ledger's.
    let seed = |label: &str| {
        let start = Instant::now();
        let out = Command::new(COHORT).arg("seed").arg(&dir).args(["--redis", &redis.url()]).output().unwrap();
        assert!(out.status.success(), "{label}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (start.elapsed(), stdout)
    };
    let (seed_time, seeded) = seed("seed");
    assert!(seeded.starts_with("Seeded"), "{seeded}");
    let (verify_time, again) = seed("seed again");
    assert!(again.starts_with("AlreadySeeded"), "{again}");

    let spans_at_start = traced.map_or(0, cohort_tests::otlp::Receiver::count);
    let port = cohort_tests::free_port().unwrap();
    let start_begin = Instant::now();
    let mut coordinator = Command::new(COHORT)
        .arg("coordinator")
        .arg(&dir)
        .args(["--redis", &redis.url(), "--listen", &format!("127.0.0.1:{port}"), "--reconcile-ms", "500"])
        .args(["--journal", if durable { "auto" } else { "off" }])
        .envs(
            traced
                .map(|r| {
                    [("OTEL_EXPORTER_OTLP_ENDPOINT", r.grpc_url.as_str()), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]
                })
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(coordinator.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    assert!(ready.contains("listening"), "{ready}");
    let start_time = start_begin.elapsed();
    let rss_idle = rss_kib(&coordinator, "VmRSS");

    let url = format!("http://127.0.0.1:{port}");
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let manifest_sha = cohort_core::hash::sha256_hex(&fs::read(dir.join("manifest.json")).unwrap());
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (url, done, sha) = (url.clone(), Arc::clone(&done), manifest_sha.clone());
        let cohort = manifest["cohort"].as_str().unwrap().to_owned();
        let journals = journals.clone();
        tasks.push(tokio::spawn(async move { worker(w, url, cohort, sha, done, &journals).await }));
    }
    // Sample the coordinator's RSS while the load runs.
    let mut rss_peak_during = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        rss_peak_during = rss_peak_during.max(rss_kib(&coordinator, "VmRSS"));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed();
    let completed = done.load(Ordering::Relaxed);
    let hwm = rss_kib(&coordinator, "VmHWM");

    // Stop the coordinator (SIGTERM) and read its round-trip count.
    Command::new("kill").arg("-TERM").arg(coordinator.id().to_string()).status().unwrap();
    let mut round_trips = None;
    for line in lines.map_while(Result::ok) {
        if let Some(n) = line.strip_prefix("coordinator stopped: ") {
            round_trips = n.split_whitespace().next().and_then(|n| n.parse::<u64>().ok());
        }
    }
    let _ = coordinator.wait();
    // The coordinator flushed its last spans as it stopped.
    let spans = traced.map(|r| r.count() - spans_at_start);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "cohort of {runs} runs ({} questions x {ARMS} arms), durability {}:",
        runs / ARMS,
        match store {
            Store::SingleEverysec => "ON (redis appendfsync everysec, workers journal every report batch with fsync)",
            Store::Single => "OFF (redis without AOF, no journal)",
            Store::Cluster =>
                "ON, REDIS CLUSTER (3 masters + 3 replicas, no AOF; workers journal every report batch with fsync)",
        }
    );
    let _ = writeln!(
        out,
        "  traces                {}",
        match spans {
            Some(n) => format!("EXPORTED over OTLP/gRPC to a receiver in the benchmark's process: {n} spans received"),
            None => "off (no OTEL_* variables)".to_owned(),
        }
    );
    let _ = writeln!(
        out,
        "  seeding               {:.2} s   (`cohort seed`; target < 3 s at 1M runs)",
        seed_time.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "    reading + verifying {:.2} s   (a second `cohort seed`, which finds the ledger seeded)",
        verify_time.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "    writing the ledger  {:.2} s   (the difference)",
        seed_time.saturating_sub(verify_time).as_secs_f64()
    );
    let _ = writeln!(
        out,
        "  coordinator start     {:.2} s   (its own `cohort seed` finds the ledger seeded)",
        start_time.as_secs_f64()
    );
    let _ = writeln!(out, "  lifecycles            {completed} in {:.2} s", elapsed.as_secs_f64());
    let _ =
        writeln!(out, "  lifecycles/s          {:.0}   (target >= 10000)", completed as f64 / elapsed.as_secs_f64());
    match round_trips {
        Some(n) => {
            let _ = writeln!(
                out,
                "  redis round trips/run {:.2}   (all the coordinator sent: {n}; seeding runs in a child `cohort seed`)",
                n as f64 / completed.max(1) as f64
            );
        }
        None => {
            let _ = writeln!(out, "  redis round trips/run unknown (the coordinator did not report)");
        }
    }
    let _ = writeln!(
        out,
        "  coordinator RSS       {:.1} MiB idle after start, {:.1} MiB peak during the run, {:.1} MiB high-water",
        rss_idle as f64 / 1024.0,
        rss_peak_during as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    let _ = writeln!(out, "  calls retried (Unavailable) {} so far", RETRIED.load(Ordering::Relaxed));
    print!("{out}");
    drop(redis);
}

/// A load-generating worker: lease a batch, report each run completed;
/// journaling each batch first when the coordinator asks for it.
async fn worker(w: usize, url: String, cohort: String, manifest_sha256: String, done: Arc<AtomicU64>, journals: &Path) {
    let mut client = CoordinatorClient::connect(url).await.unwrap();
    let registered = client
        .register(pb::RegisterRequest { worker_name: format!("bench-{w}"), arms: vec![], cohort, manifest_sha256 })
        .await
        .unwrap()
        .into_inner();
    let id = registered.worker_id;
    let mut journal = registered.journal_reports.then(|| Journal::open(journals, &format!("bench-{w}")).unwrap());
    loop {
        let request = pb::LeaseRequest { worker_id: id.clone(), max_runs: LEASE_BATCH };
        let lease = until_ok(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.lease(r).await }
        })
        .await;
        if lease.leases.is_empty() {
            if lease.cohort_done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(u64::from(lease.retry_after_ms.max(1)))).await;
            continue;
        }
        // Every leased run completes at once (a zero-latency system) and
        // the batch is reported in one call, as a busy worker does.
        let results: Vec<pb::ReportResultRequest> = lease
            .leases
            .into_iter()
            .map(|l| pb::ReportResultRequest {
                worker_id: id.clone(),
                lease: Some(pb::LeaseRef { run_id: l.run_id, fencing_token: l.fencing_token }),
                outcome: pb::Outcome::Completed as i32,
                reason: String::new(),
                record_sha256: String::new(),
                observed_version: String::new(),
                attempt: Some(pb::Attempt { class: pb::AttemptClass::Ok as i32, ..Default::default() }),
                // As a worker does: the coordinator records the result in
                // the run's trace (its lease span stands in for the run's).
                traceparent: l.traceparent,
            })
            .collect();
        // The real worker syncs its journal on the blocking pool; here the
        // generator's own task blocks, which costs the same fsync.
        let ids = journal.as_mut().map(|j| {
            tokio::task::block_in_place(|| j.append(results.iter().cloned().map(Entry::Result).collect()).unwrap())
        });
        let request = pb::ReportResultsRequest { worker_id: id.clone(), results };
        let r = until_ok(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.report_results(r).await }
        })
        .await;
        if let (Some(j), Some(ids), Some(d)) = (journal.as_mut(), ids, r.durability) {
            j.acked(&ids, Ack { epoch: d.epoch, seq: d.ack_seq });
            j.forget_durable(d.epoch, d.durable_seq).unwrap();
        }
        done.fetch_add(r.accepted.iter().filter(|a| **a).count() as u64, Ordering::Relaxed);
    }
}

/// Calls until the coordinator answers; an outage (`Unavailable`: the
/// ledger timed out under load) is retried after 10 ms, as a real worker
/// retries it, and counted.
async fn until_ok<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    loop {
        match call().await {
            Ok(r) => return r.into_inner(),
            Err(s) if s.code() == tonic::Code::Unavailable => {
                RETRIED.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(s) => panic!("the coordinator refused: {s:?}"),
        }
    }
}

/// Calls retried after an outage, over the whole benchmark.
static RETRIED: AtomicU64 = AtomicU64::new(0);

fn write_cohort(dir: &Path, questions: usize) {
    fs::create_dir_all(dir).unwrap();
    let mut toml = String::from("name = \"bench\"\nseed = 1\ncategories = [\"science\"]\n");
    for a in 0..ARMS {
        let _ = write!(
            toml,
            "\n[[arms]]\nid = \"arm{a}\"\nlabel = \"Arm {a} (SIMULATED)\"\nadapter = \"sim\"\npinned_version = \"\"\nvendor_lineage = \"sim{a}\"\nconcurrency = 1000\n"
        );
    }
    let toml = toml.replace("pinned_version = \"\"", "pinned_version = \"sim-1\"");
    let mut q = String::from("[\n");
    for i in 0..questions {
        let sep = if i + 1 == questions { "" } else { "," };
        let _ = writeln!(q, "  {{\"id\": \"q{i}\", \"category\": \"science\", \"text\": \"Question {i}?\"}}{sep}");
    }
    q.push_str("]\n");
    fs::write(dir.join("cohort.toml"), toml).unwrap();
    fs::write(dir.join("questions.json"), q).unwrap();
    fs::write(dir.join("suffix.txt"), "Cite sources.\n").unwrap();
    fs::write(dir.join("protocol.md"), "# P\n").unwrap();
    fs::write(dir.join("rubric.md"), "# R\n").unwrap();
}

fn rss_kib(child: &Child, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
