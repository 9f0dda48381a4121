//! Benchmark: the Redis CPU one run's lifecycle costs through the ledger's
//! own scripts, with nothing else on the server (issue 24: cohort's Redis
//! is what limits its lifecycle rate, and a job's Redis CPU decides the
//! ratio to BullMQ). Prints figures; asserts nothing about speed.
//!
//!     cargo bench -p cohort-ledger --bench scripts                  # 100k runs, 32 a call
//!     COHORT_BENCH_RUNS=1000000 COHORT_BENCH_BATCH=8 cargo bench -p cohort-ledger --bench scripts
//!
//! A `RedisLedger` on a private redis-server (`appendonly yes`,
//! `appendfsync everysec`, as the lifecycle bench's durable case; then
//! without an AOF) is seeded with the runs (10 arms, one repeat). One
//! client leases every run, 32 a call as the lifecycle bench's load
//! generators do, then reports them completed, 32 a `finish_many` call, so
//! each script's share is read apart (the lease set then holds every run
//! at once, where the lifecycle bench's holds a few thousand). Redis's
//! main-thread CPU (`INFO cpu`) is read before and after each part, so the
//! client's own time does not count; `INFO commandstats` splits a script's
//! time into the commands it runs and its own work (Lua, the calls between
//! Lua and Redis, propagation). Two batch sizes tell a call's fixed cost
//! from a run's. `cargo bench -p cohort-cli --bench lifecycle` measures
//! the whole lifecycle beside BullMQ.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use cohort_core::taxonomy::{AttemptClass, Outcome};
use cohort_ledger::redis::RedisLedger;
use cohort_ledger::{ArmPlan, AttemptRecord, LeaseRef, Ledger, PlanHeader, RunResult};
use cohort_tests::RedisServer;

const ARMS: usize = 10;
/// Runs a lease and a finish call carry (`COHORT_BENCH_BATCH`, else 32).
fn batch() -> u32 {
    std::env::var("COHORT_BENCH_BATCH").ok().and_then(|n| n.parse().ok()).unwrap_or(32)
}

fn main() {
    let runs: usize = std::env::var("COHORT_BENCH_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!("ledger scripts benchmark: {runs} runs ({ARMS} arms), lease and finish {} at a time, one client", batch());
    for aof in [true, false] {
        let server = if aof { RedisServer::start_everysec() } else { RedisServer::start_with(false) }.unwrap();
        let figures = runtime.block_on(lifecycles(&server, runs));
        let per_run = |usec: f64| usec / runs as f64;
        println!(
            "  {}: {:.1} us of Redis CPU a lifecycle ({:.0} lifecycles/s from one client)",
            if aof { "AOF everysec" } else { "no AOF" },
            per_run(figures.lease.cpu_usec + figures.finish.cpu_usec),
            runs as f64 / figures.seconds,
        );
        for (script, share) in [("lease.lua", &figures.lease), ("finish.lua", &figures.finish)] {
            println!(
                "    {script:<10} {:5.1} us a run: scripts {:.1} us, of which the commands they run {:.1} us and \
                 their own work (Lua, calls into Redis, propagation) {:.1} us; {:.1} commands and {:.0} AOF bytes a run",
                per_run(share.cpu_usec),
                per_run(share.scripts_usec),
                per_run(share.commands_usec),
                per_run(share.scripts_usec - share.commands_usec),
                share.commands as f64 / runs as f64,
                per_run(share.aof_bytes),
            );
        }
    }
}

/// What one script's calls cost Redis over every run.
struct Share {
    cpu_usec: f64,
    /// Bytes the server appended to its AOF (0 without one).
    aof_bytes: f64,
    scripts_usec: f64,
    commands_usec: f64,
    commands: u64,
}

struct Figures {
    lease: Share,
    finish: Share,
    seconds: f64,
}

async fn lifecycles(server: &RedisServer, runs: usize) -> Figures {
    let ledger = RedisLedger::connect(&server.url(), "bench").await.unwrap();
    let questions: Vec<(String, String)> =
        (0..runs.div_ceil(ARMS)).map(|q| (format!("q{q:06}"), format!("Question {q}?"))).collect();
    let arms: Vec<String> = (0..ARMS).map(|a| format!("arm-{a}")).collect();
    let header = PlanHeader {
        cohort: "bench".into(),
        manifest_sha256: "a".repeat(64),
        window_ms: 48 * 3_600_000,
        retry: cohort_core::config::RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 100,
            max_backoff_ms: 400,
            max_total_secs: 3600,
        },
        arms: arms
            .iter()
            .map(|a| ArmPlan {
                id: a.clone(),
                concurrency: runs as u32,
                pinned_version: "v1".into(),
                ..ArmPlan::default()
            })
            .collect(),
        rounds: 1,
        round_every_ms: 0,
    };
    let q_ids: Vec<&str> = questions.iter().map(|(q, _)| q.as_str()).collect();
    let a_ids: Vec<&str> = arms.iter().map(String::as_str).collect();
    let order: Vec<String> =
        cohort_core::order::run_order(&q_ids, &a_ids, 1, 7).iter().take(runs).map(ToString::to_string).collect();
    ledger.seed(&header, &questions, &order, 0).await.unwrap();

    // Every run is leased first, then every run finished, so each script's
    // share is read apart (the lease set then holds every run at once,
    // where the lifecycle bench's holds a few thousand).
    let at_start = Sample::of(server);
    let started = Instant::now();
    let now = 1_000;
    let mut grants = Vec::with_capacity(runs);
    loop {
        let batch = ledger.lease("bench-7-1a2b3c4d5e-0", batch(), now, 3_600_000).await.unwrap();
        if batch.leases.is_empty() {
            break;
        }
        grants.extend(batch.leases);
    }
    assert_eq!(grants.len(), runs, "every run leased");
    let leased = Sample::of(server);
    for chunk in grants.chunks(batch() as usize) {
        let results: Vec<(LeaseRef, RunResult)> = chunk
            .iter()
            .map(|g| {
                let attempt = AttemptRecord {
                    class: AttemptClass::Ok,
                    http_status: 200,
                    detail: String::new(),
                    started_ms: now,
                    ended_ms: now + 1,
                    observed_version: Some("v1".into()),
                    worker: String::new(),
                    attempt: g.attempt,
                    token: 0,
                    retry_after_ms: None,
                };
                let result = RunResult {
                    outcome: Outcome::Completed,
                    reason: String::new(),
                    record_sha256: "9f".repeat(32),
                    observed_version: Some("v1".into()),
                    attempt,
                };
                (LeaseRef { run_id: g.run_id.clone(), token: g.token }, result)
            })
            .collect();
        let accepted = ledger.finish_many("bench-7-1a2b3c4d5e-0", &results, now + 2).await.unwrap();
        assert!(accepted.iter().all(|a| *a), "every result is accepted");
    }
    let seconds = started.elapsed().as_secs_f64();
    let finished = Sample::of(server);
    Figures { lease: leased.since(&at_start), finish: finished.since(&leased), seconds }
}

/// Redis's main-thread CPU and its command statistics at one moment.
struct Sample {
    cpu_usec: f64,
    aof_bytes: f64,
    stats: ScriptStats,
}

impl Sample {
    fn of(server: &RedisServer) -> Sample {
        let aof_bytes = info(server, "persistence").get("aof_current_size").and_then(|n| n.parse().ok()).unwrap_or(0.0);
        Sample { cpu_usec: main_cpu_usec(server), aof_bytes, stats: script_stats(server) }
    }

    fn since(&self, before: &Sample) -> Share {
        Share {
            cpu_usec: self.cpu_usec - before.cpu_usec,
            aof_bytes: self.aof_bytes - before.aof_bytes,
            scripts_usec: self.stats.scripts_usec - before.stats.scripts_usec,
            commands_usec: self.stats.commands_usec - before.stats.commands_usec,
            commands: self.stats.commands - before.stats.commands,
        }
    }
}

/// `INFO` `section` of the server, as field -> value.
fn info(server: &RedisServer, section: &str) -> HashMap<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    write!(stream, "*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header).unwrap();
    let len: usize = header.trim().trim_start_matches('$').parse().unwrap();
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

fn main_cpu_usec(server: &RedisServer) -> f64 {
    let cpu = info(server, "cpu");
    let secs = |k: &str| cpu[k].parse::<f64>().unwrap();
    (secs("used_cpu_user_main_thread") + secs("used_cpu_sys_main_thread")) * 1e6
}

struct ScriptStats {
    /// `usec` of `evalsha`: the scripts, the commands they run included.
    scripts_usec: f64,
    /// `usec` of every other command (those the scripts run).
    commands_usec: f64,
    commands: u64,
}

fn script_stats(server: &RedisServer) -> ScriptStats {
    let mut stats = ScriptStats { scripts_usec: 0.0, commands_usec: 0.0, commands: 0 };
    for (name, value) in info(server, "commandstats") {
        let Some(command) = name.strip_prefix("cmdstat_") else { continue };
        let field = |f: &str| value.split(',').find_map(|kv| kv.strip_prefix(f)).and_then(|v| v.parse::<f64>().ok());
        let (usec, calls) = (field("usec=").unwrap_or(0.0), field("calls=").unwrap_or(0.0));
        if command.starts_with("eval") {
            stats.scripts_usec += usec;
        } else {
            stats.commands_usec += usec;
            stats.commands += calls as u64;
        }
    }
    stats
}
