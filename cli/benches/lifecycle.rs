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
//! /proc for the coordinator process. The clock runs from the load
//! generators' start to the last result accepted (BullMQ's, beside it, to
//! its last `completed` event), not to when the last of them, back from an
//! empty lease's wait, saw the cohort done.
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
//! A second and a third run per size, right after the first and like it
//! durability off, export the coordinator's spans (the run's root, a lease
//! span and a result span per run, the cohort span) to a receiver in this
//! process (`cohort_tests::otlp`, decoding every request and counting its
//! spans; `COHORT_BENCH_KEEP_SPANS=1` keeps them all, as the trace tests'
//! receiver does), over OTLP/gRPC and then over
//! OTLP/HTTP-protobuf (the specification's default protocol), and a line
//! per protocol prints what tracing costs beside the untraced run:
//! lifecycles/s, the coordinator's CPU per lifecycle (from
//! `/proc/PID/stat`) and the p99 of the load generators' lease and report
//! calls, each as a ratio beside its target (issue 24: p99 within 2x, CPU
//! within 1.3x; printed, never asserted).
//!
//!     COHORT_BENCH_CONFIGS=tracing ...   # only the untraced and traced runs
//!     COHORT_BENCH_ROUNDS=5 ...          # alternate them 5 times, print the medians
//!
//! Beside BullMQ (issue 24), `COHORT_BENCH_CONFIGS=bullmq`: per size, with
//! durability off and then on, BullMQ (npm `bullmq`, pinned in
//! `benches/bullmq/package.json`; one Node process running its documented
//! `Worker` with concurrency [`WORKERS`] and a no-op processor, on a
//! private redis-server configured as cohort's, the same job count, a
//! [`BULLMQ_PAYLOAD`]-byte payload per job) and then cohort's lifecycle
//! as above; a line prints for both the jobs/s and their ratio (target:
//! cohort >= 2x BullMQ with durability on), the commands Redis executed per
//! job (`INFO commandstats`, the commands scripts run included) and the
//! scripts called per job, and the CPU seconds per 10k jobs of each
//! process (BullMQ's Node process and its Redis; cohort's coordinator, its
//! Redis, and the load generators in this process). Needs `node` and `npm`
//! (the packages are installed once, from the lock file, under
//! `~/.cache/cohort/bullmq-bench`); without them the line says so.
//!
//!     COHORT_BENCH_CONFIGS=bullmq COHORT_BENCH_SIZES=10000 cargo bench -p cohort-cli --bench lifecycle
//!     COHORT_BENCH_DURABILITY=on ...     # only the durable case (or `off`)

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
/// The bytes of data each BullMQ job carries: about what a run of
/// cohort's plan holds (its id, arm, question and position).
const BULLMQ_PAYLOAD: usize = 128;

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
    // second configuration, durability off like the first, to show what
    // tracing costs beside it.
    // It decodes every request and counts the spans, as a collector's
    // receiving end does, but keeps none: a receiver keeping 300,000 spans
    // a run with a map of attributes each (`COHORT_BENCH_KEEP_SPANS=1`, as
    // the trace tests' does) shares the 2 cores with the coordinator it
    // measures (same hour, medians of 3 rounds over gRPC / HTTP: traced /
    // untraced 1.33-1.49x beside it, 1.20-1.36x beside the counting one).
    let receiver = if std::env::var("COHORT_BENCH_KEEP_SPANS").is_ok_and(|v| v == "1") {
        runtime.block_on(cohort_tests::otlp::Receiver::start())
    } else {
        runtime.block_on(cohort_tests::otlp::Receiver::start_counting())
    };
    let configs = std::env::var("COHORT_BENCH_CONFIGS").unwrap_or_default();
    if configs == "bullmq" {
        // `COHORT_BENCH_DURABILITY=on` (or `off`): that case alone.
        let durability = std::env::var("COHORT_BENCH_DURABILITY").unwrap_or_default();
        let stores = [Store::Single, Store::SingleEverysec]
            .into_iter()
            .filter(|s| durability.is_empty() || (durability == "on") == (*s == Store::SingleEverysec));
        for runs in sizes {
            for store in stores.clone() {
                let reference = bullmq::run(runs, store == Store::SingleEverysec);
                let ours = runtime.block_on(bench(runs, store, None));
                bullmq::compare(runs, store, reference, &ours);
            }
        }
        return;
    }
    let only_tracing = configs == "tracing";
    // Tracing's cost is a ratio of two noisy figures on a shared machine:
    // with `COHORT_BENCH_ROUNDS=N` the untraced run and the traced ones
    // alternate N times, and a last line gives the median of each ratio.
    let rounds: usize = std::env::var("COHORT_BENCH_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(1).max(1);
    for runs in sizes {
        let mut ratios: Vec<(Protocol, f64, f64)> = Vec::new();
        for round in 1..=rounds {
            if rounds > 1 {
                println!("tracing round {round} of {rounds}");
            }
            let untraced = runtime.block_on(bench(runs, Store::Single, None));
            for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
                let traced =
                    runtime.block_on(bench(runs, Store::Single, Some(Traced { receiver: &receiver, protocol })));
                let p99 = traced.call_p99.as_secs_f64() / untraced.call_p99.as_secs_f64();
                let cpu = traced.cpu_per_lifecycle().as_secs_f64() / untraced.cpu_per_lifecycle().as_secs_f64();
                ratios.push((protocol, p99, cpu));
                println!(
                    "  traced over {} / untraced at {runs} runs (durability off): p99 of a call {p99:.2}x (target <= 2x), \
                     coordinator CPU per lifecycle {cpu:.2}x (target <= 1.3x), lifecycles/s {:.2}x, p50 of a call {:.2}x",
                    protocol.label(),
                    traced.rate() / untraced.rate(),
                    traced.call_p50.as_secs_f64() / untraced.call_p50.as_secs_f64(),
                );
            }
        }
        if rounds > 1 {
            for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
                let median = |pick: fn(&(Protocol, f64, f64)) -> f64| {
                    let mut v: Vec<f64> = ratios.iter().filter(|r| r.0 == protocol).map(pick).collect();
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                println!(
                    "  median of {rounds} rounds, traced over {} / untraced at {runs} runs: p99 of a call {:.2}x \
                     (target <= 2x), coordinator CPU per lifecycle {:.2}x (target <= 1.3x)",
                    protocol.label(),
                    median(|r| r.1),
                    median(|r| r.2),
                );
            }
        }
        if only_tracing {
            continue;
        }
        for store in [Store::SingleEverysec, Store::Cluster] {
            runtime.block_on(bench(runs, store, None));
        }
    }
}

/// The OTLP protocols the traced runs export over.
#[derive(Clone, Copy, PartialEq)]
enum Protocol {
    Grpc,
    HttpProtobuf,
}

impl Protocol {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`'s value.
    fn env(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Protocol::Grpc => "OTLP/gRPC",
            Protocol::HttpProtobuf => "OTLP/HTTP-protobuf",
        }
    }
}

/// Where a traced run exports its spans, and how.
#[derive(Clone, Copy)]
struct Traced<'a> {
    receiver: &'a cohort_tests::otlp::Receiver,
    protocol: Protocol,
}

impl Traced<'_> {
    fn endpoint(&self) -> &str {
        match self.protocol {
            Protocol::Grpc => &self.receiver.grpc_url,
            Protocol::HttpProtobuf => &self.receiver.http_url,
        }
    }
}

/// What one configuration measured, for the traced-against-untraced line.
struct Figures {
    completed: u64,
    elapsed: Duration,
    /// The coordinator's CPU (user + system) while the load ran.
    cpu: Duration,
    /// Over every lease and report call of the load generators.
    call_p50: Duration,
    call_p99: Duration,
    /// Redis's share while the load ran, on a single server (unknown on
    /// the cluster).
    redis: Option<bullmq::RedisWork>,
    /// This process's CPU while the load ran: the load generators (and the
    /// OTLP receiver when traced).
    load_cpu: Duration,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_per_lifecycle(&self) -> Duration {
        self.cpu / u32::try_from(self.completed.max(1)).unwrap_or(u32::MAX)
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

async fn bench(runs: usize, store: Store, traced: Option<Traced<'_>>) -> Figures {
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

    let spans_at_start = traced.map_or(0, |t| t.receiver.count());
    let port = cohort_tests::free_port().unwrap();
    let start_begin = Instant::now();
    let mut coordinator = Command::new(COHORT)
        .arg("coordinator")
        .arg(&dir)
        .args(["--redis", &redis.url(), "--listen", &format!("127.0.0.1:{port}"), "--reconcile-ms", "500"])
        .args(["--journal", if durable { "auto" } else { "off" }])
        .envs(traced.iter().flat_map(|t| {
            [("OTEL_EXPORTER_OTLP_ENDPOINT", t.endpoint()), ("OTEL_EXPORTER_OTLP_PROTOCOL", t.protocol.env())]
        }))
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
    // When the last run's result was accepted: the clock stops there, as
    // BullMQ's stops at its last `completed` event, not when the last
    // load generator, back from an empty lease's wait, saw the cohort done.
    let finished = Arc::new(std::sync::OnceLock::new());
    let cpu_before = cpu_time(&coordinator);
    let load_before = cohort_tests::proc::cpu_time(std::process::id());
    let redis_before = match &redis {
        Running::Server(server) => bullmq::RedisWork::of(server),
        Running::Cluster(_) => None,
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (url, sha) = (url.clone(), manifest_sha.clone());
        let progress = Progress { done: Arc::clone(&done), runs: runs as u64, finished: Arc::clone(&finished) };
        let cohort = manifest["cohort"].as_str().unwrap().to_owned();
        let journals = journals.clone();
        tasks.push(tokio::spawn(async move { worker(w, url, cohort, sha, progress, &journals).await }));
    }
    // Sample the coordinator's RSS while the load runs.
    let mut rss_peak_during = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        rss_peak_during = rss_peak_during.max(rss_kib(&coordinator, "VmRSS"));
    }
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await.unwrap());
    }
    let elapsed = finished.get().map_or_else(|| start.elapsed(), |at: &Instant| at.duration_since(start));
    let cpu = cpu_time(&coordinator).saturating_sub(cpu_before);
    let load_cpu = cohort_tests::proc::cpu_time(std::process::id()).saturating_sub(load_before);
    let redis_work = match &redis {
        Running::Server(server) => {
            bullmq::RedisWork::of(server).zip(redis_before).map(|(after, before)| after - before)
        }
        Running::Cluster(_) => None,
    };
    calls.sort();
    let at =
        |p: f64| calls.get(((calls.len().saturating_sub(1)) as f64 * p).round() as usize).copied().unwrap_or_default();
    let (call_p50, call_p99) = (at(0.5), at(0.99));
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
    let spans = traced.map(|t| (t.protocol.label(), t.receiver.count() - spans_at_start));

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
            Some((over, n)) => {
                format!("EXPORTED over {over} to a receiver in the benchmark's process: {n} spans received")
            }
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
    let _ = writeln!(
        out,
        "  lifecycles            {completed} in {:.2} s   (from the load generators' start to the last result accepted)",
        elapsed.as_secs_f64()
    );
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
        "  coordinator CPU       {:.2} s = {:.1} us per lifecycle   (user + system while the load ran)",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / completed.max(1) as f64
    );
    let _ = writeln!(
        out,
        "  call latency          p50 {:.2} ms, p99 {:.2} ms   (every lease and report call of the load generators)",
        call_p50.as_secs_f64() * 1000.0,
        call_p99.as_secs_f64() * 1000.0
    );
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
    Figures { completed, elapsed, cpu, call_p50, call_p99, redis: redis_work, load_cpu }
}

/// The lifecycles the load generators completed, and when the last of
/// the cohort's `runs` was.
struct Progress {
    done: Arc<AtomicU64>,
    runs: u64,
    finished: Arc<std::sync::OnceLock<Instant>>,
}

impl Progress {
    fn completed(&self, n: u64) {
        if self.done.fetch_add(n, Ordering::Relaxed) + n >= self.runs {
            let _ = self.finished.set(Instant::now());
        }
    }
}

/// A load-generating worker: lease a batch, report each run completed;
/// journaling each batch first when the coordinator asks for it. Returns
/// the latency of each of its lease and report calls (retries included).
async fn worker(
    w: usize,
    url: String,
    cohort: String,
    manifest_sha256: String,
    progress: Progress,
    journals: &Path,
) -> Vec<Duration> {
    let mut client = CoordinatorClient::connect(url).await.unwrap();
    let registered = client
        .register(pb::RegisterRequest { worker_name: format!("bench-{w}"), arms: vec![], cohort, manifest_sha256 })
        .await
        .unwrap()
        .into_inner();
    let id = registered.worker_id;
    let mut journal = registered.journal_reports.then(|| Journal::open(journals, &format!("bench-{w}")).unwrap());
    let mut calls = Vec::new();
    loop {
        let request = pb::LeaseRequest { worker_id: id.clone(), max_runs: LEASE_BATCH };
        let called = Instant::now();
        let lease = until_ok(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.lease(r).await }
        })
        .await;
        calls.push(called.elapsed());
        if lease.leases.is_empty() {
            if lease.cohort_done {
                return calls;
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
        let called = Instant::now();
        let r = until_ok(|| {
            let mut c = client.clone();
            let r = request.clone();
            async move { c.report_results(r).await }
        })
        .await;
        calls.push(called.elapsed());
        if let (Some(j), Some(ids), Some(d)) = (journal.as_mut(), ids, r.durability) {
            j.acked(&ids, Ack { epoch: d.epoch, seq: d.ack_seq });
            j.forget_durable(d.epoch, d.durable_seq).unwrap();
        }
        progress.completed(r.accepted.iter().filter(|a| **a).count() as u64);
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

/// The CPU time (user + system) of `child` so far.
fn cpu_time(child: &Child) -> Duration {
    cohort_tests::proc::cpu_time(child.id())
}

fn rss_kib(child: &Child, field: &str) -> u64 {
    cohort_tests::proc::status_kib(child.id(), field)
}

/// BullMQ, the reference (`COHORT_BENCH_CONFIGS=bullmq`; the module header).
mod bullmq {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use cohort_tests::RedisServer;

    use super::{BULLMQ_PAYLOAD, Figures, Store, WORKERS};

    /// What Redis did over a stretch of time.
    #[derive(Debug, Clone, Copy)]
    pub struct RedisWork {
        /// Commands executed (`INFO commandstats`, inside scripts included).
        pub commands: u64,
        /// Scripts called (`eval`, `evalsha`, `fcall` and their read-only
        /// forms).
        pub scripts: u64,
        pub cpu: Duration,
    }

    impl RedisWork {
        /// So far, on `server`.
        pub fn of(server: &RedisServer) -> Option<RedisWork> {
            let stats = server.commandstats().ok()?;
            let scripts = stats
                .iter()
                .filter(|(name, _)| name.starts_with("eval") || name.starts_with("fcall"))
                .map(|(_, n)| n)
                .sum();
            Some(RedisWork {
                commands: stats.values().sum(),
                scripts,
                cpu: cohort_tests::proc::cpu_time(server.pid()?),
            })
        }
    }

    impl std::ops::Sub for RedisWork {
        type Output = RedisWork;
        fn sub(self, before: RedisWork) -> RedisWork {
            RedisWork {
                commands: self.commands.saturating_sub(before.commands),
                scripts: self.scripts.saturating_sub(before.scripts),
                cpu: self.cpu.saturating_sub(before.cpu),
            }
        }
    }

    /// One BullMQ run: its jobs/s and what each process spent.
    pub struct Reference {
        jobs: u64,
        seconds: f64,
        node_cpu: Duration,
        redis: Option<RedisWork>,
    }

    /// Where the pinned packages are installed: once, from the lock file.
    fn prepared() -> Result<PathBuf, String> {
        let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/bullmq");
        let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
        let dir = PathBuf::from(home).join(".cache/cohort/bullmq-bench");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let lock = std::fs::read(source.join("package-lock.json")).map_err(|e| e.to_string())?;
        let installed = std::fs::read(dir.join("package-lock.json")).ok();
        for file in ["package.json", "package-lock.json", "bench.js"] {
            std::fs::copy(source.join(file), dir.join(file)).map_err(|e| format!("{file}: {e}"))?;
        }
        if installed.as_deref() != Some(&lock[..]) || !dir.join("node_modules/bullmq").exists() {
            let out = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&dir)
                .output()
                .map_err(|e| format!("cannot run npm: {e}"))?;
            if !out.status.success() {
                return Err(format!("npm ci failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
            }
        }
        Ok(dir)
    }

    /// BullMQ over `jobs` jobs on a private redis-server (`everysec`: with
    /// `appendfsync everysec`, as cohort's durable configuration).
    pub fn run(jobs: usize, everysec: bool) -> Result<Reference, String> {
        let dir = prepared()?;
        let redis = if everysec { RedisServer::start_everysec() } else { RedisServer::start() }
            .map_err(|e| format!("redis-server: {e}"))?;
        let mut child = Command::new("node")
            .arg("bench.js")
            .args([redis.port().to_string(), jobs.to_string(), WORKERS.to_string(), BULLMQ_PAYLOAD.to_string()])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run node: {e}"))?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut line = || -> Result<serde_json::Value, String> {
            let l = lines.next().ok_or("bench.js ended early")?.map_err(|e| e.to_string())?;
            serde_json::from_str(&l).map_err(|e| format!("bench.js said {l:?}: {e}"))
        };
        line()?; // {"added": N}: the jobs are in the queue.
        let before = RedisWork::of(&redis);
        child.stdin.as_mut().ok_or("no stdin")?.write_all(b"go\n").map_err(|e| e.to_string())?;
        let done = line()?;
        let after = RedisWork::of(&redis);
        let _ = child.wait();
        let completed = done["completed"].as_u64().unwrap_or(0);
        if completed != jobs as u64 {
            return Err(format!("BullMQ completed {completed} of {jobs} jobs: {done}"));
        }
        Ok(Reference {
            jobs: completed,
            seconds: done["seconds"].as_f64().unwrap_or(f64::NAN),
            node_cpu: Duration::from_secs_f64(done["cpu_seconds"].as_f64().unwrap_or(0.0)),
            redis: after.zip(before).map(|(a, b)| a - b),
        })
    }

    /// The line that sets cohort beside BullMQ.
    pub fn compare(runs: usize, store: Store, reference: Result<Reference, String>, ours: &Figures) {
        let durability = if store == Store::SingleEverysec {
            "ON (appendfsync everysec; cohort's workers journal every report batch)"
        } else {
            "OFF"
        };
        let reference = match reference {
            Ok(r) => r,
            Err(why) => {
                println!("  beside BullMQ at {runs} runs, durability {durability}: BullMQ not measured ({why})");
                return;
            }
        };
        let per_10k = |cpu: Duration, n: u64| cpu.as_secs_f64() * 10_000.0 / n.max(1) as f64;
        let redis_line = |w: Option<RedisWork>, n: u64| match w {
            Some(w) => format!(
                "{:.1} commands, {:.2} scripts per job; redis {:.3} s",
                w.commands as f64 / n.max(1) as f64,
                w.scripts as f64 / n.max(1) as f64,
                per_10k(w.cpu, n)
            ),
            None => "redis not measured".to_owned(),
        };
        let bull_rate = reference.jobs as f64 / reference.seconds;
        println!(
            "  beside BullMQ at {runs} runs, durability {durability}:\n    BullMQ  {bull_rate:.0} jobs/s ({} jobs, \
             concurrency {WORKERS}, {BULLMQ_PAYLOAD}-byte payload); {}; CPU s per 10k jobs: node {:.3}\n    cohort  \
             {:.0} lifecycles/s = {:.2}x BullMQ (target >= 2x with durability on); {}; CPU s per 10k jobs: \
             coordinator {:.3}, load generators {:.3}",
            reference.jobs,
            redis_line(reference.redis, reference.jobs),
            per_10k(reference.node_cpu, reference.jobs),
            ours.rate(),
            ours.rate() / bull_rate,
            redis_line(ours.redis, ours.completed),
            per_10k(ours.cpu, ours.completed),
            per_10k(ours.load_cpu, ours.completed),
        );
        // What 2x would take on this machine: every process of a side
        // shares its cores, so the CPU a job costs all of them together
        // bounds the rate.
        let per_job_us = |cpu: Duration, n: u64| cpu.as_secs_f64() * 1e6 / n.max(1) as f64;
        let (Some(theirs), Some(mine)) = (reference.redis, ours.redis) else { return };
        let bull_us = per_job_us(reference.node_cpu + theirs.cpu, reference.jobs);
        let ours_us = per_job_us(ours.cpu + ours.load_cpu + mine.cpu, ours.completed);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let redis_us = per_job_us(mine.cpu, ours.completed);
        println!(
            "    CPU a job, every process of a side: BullMQ {bull_us:.1} us (node + redis), cohort {ours_us:.1} us \
             (coordinator + redis {redis_us:.1} + load generators); at 2x BullMQ's rate cohort's redis would need \
             {:.2} cores (it runs on one) and all of cohort's processes {:.2} of this machine's {cores}",
            2.0 * bull_rate * redis_us / 1e6,
            2.0 * bull_rate * ours_us / 1e6,
        );
    }
}
