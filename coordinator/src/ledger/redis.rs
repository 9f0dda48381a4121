//! The Redis ledger, for a cohort run by many machines.
//!
//! Every key of a cohort carries the hash tag `{NAME}` (`cohort:{NAME}:...`),
//! so one cohort lives in one Redis Cluster slot and its Lua scripts run
//! atomically over all of them. The key layout and each script's contract
//! (KEYS, ARGV, what is atomic, what it returns) are written at the top of
//! the scripts in `lua/`: `common.lua` holds the layout and the shared
//! functions (the retry policy mirrors `cohort_core::lifecycle`), and each
//! operation is one script, so a run lifecycle costs one round trip to
//! lease (per batch) and one to finish.

use std::collections::BTreeMap;

use ::redis::aio::ConnectionManager;
use ::redis::{AsyncCommands, Script, Value};
use async_trait::async_trait;

use cohort_core::taxonomy::{AttemptClass, Outcome};

use super::*;

/// How many pending runs one close call finalises (window close, abort):
/// bounded so that one script never blocks Redis for long.
const CLOSE_BATCH: usize = 5_000;
/// How many leases one expire call handles.
const EXPIRE_BATCH: usize = 1_000;
/// How many runs seeding writes per pipeline.
const SEED_BATCH: usize = 2_000;

/// The scripts, each with the shared prelude.
#[derive(Debug)]
struct Scripts {
    lease: Script,
    heartbeat: Script,
    attempt: Script,
    finish: Script,
    release: Script,
    expire: Script,
    close: Script,
    arm: Script,
    held: Script,
}

impl Scripts {
    fn load() -> Scripts {
        let with_prelude = |body: &str| Script::new(&format!("{}\n{}", include_str!("lua/common.lua"), body));
        Scripts {
            lease: with_prelude(include_str!("lua/lease.lua")),
            heartbeat: with_prelude(include_str!("lua/heartbeat.lua")),
            attempt: with_prelude(include_str!("lua/attempt.lua")),
            finish: with_prelude(include_str!("lua/finish.lua")),
            release: with_prelude(include_str!("lua/release.lua")),
            expire: with_prelude(include_str!("lua/expire.lua")),
            close: with_prelude(include_str!("lua/close.lua")),
            arm: with_prelude(include_str!("lua/arm.lua")),
            held: with_prelude(include_str!("lua/held.lua")),
        }
    }
}

/// A cohort's ledger in Redis.
#[derive(Clone)]
pub struct RedisLedger {
    /// Reconnects by itself after Redis restarts; cheap to clone.
    conn: ConnectionManager,
    /// `cohort:{NAME}:`.
    prefix: String,
    scripts: std::sync::Arc<Scripts>,
    /// Requests sent to Redis (one per script call, command or pipeline),
    /// for the benchmark's round trips per run.
    round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for RedisLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLedger").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn redis_err(e: ::redis::RedisError) -> LedgerError {
    if e.code() == Some("UNKNOWNARM") {
        return LedgerError::UnknownArm(e.detail().unwrap_or_default().to_owned());
    }
    if e.code() == Some("NOTMANUAL") {
        return LedgerError::NotManual(e.detail().unwrap_or_default().to_owned());
    }
    if e.code() == Some("NOTSEEDED") {
        return LedgerError::NotSeeded;
    }
    LedgerError::Redis(e.to_string())
}

impl RedisLedger {
    /// Connects to `url` for cohort `cohort` (its name is the hash tag).
    pub async fn connect(url: &str, cohort: &str) -> Result<RedisLedger, LedgerError> {
        let client = ::redis::Client::open(url).map_err(redis_err)?;
        let config = ::redis::aio::ConnectionManagerConfig::new()
            .set_number_of_retries(6)
            .set_max_delay(std::time::Duration::from_secs(2));
        let conn = ConnectionManager::new_with_config(client, config).await.map_err(redis_err)?;
        Ok(RedisLedger {
            conn,
            prefix: format!("cohort:{{{cohort}}}:"),
            scripts: std::sync::Arc::new(Scripts::load()),
            round_trips: std::sync::Arc::default(),
        })
    }

    /// A connection handle for one round trip (counted).
    fn rt(&self) -> ConnectionManager {
        self.round_trips.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.conn.clone()
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    fn meta(&self) -> String {
        self.key("meta")
    }

    /// Calls `close.lua` until it has nothing left to finalise.
    async fn close_all(&self, now_ms: i64, mode: &str, reason: &str) -> Result<u64, LedgerError> {
        let mut total = 0u64;
        loop {
            let n: u64 = self
                .scripts
                .close
                .key(self.meta())
                .arg(now_ms)
                .arg(mode)
                .arg(CLOSE_BATCH)
                .arg(reason)
                .invoke_async(&mut self.rt())
                .await
                .map_err(redis_err)?;
            total += n;
            if (n as usize) < CLOSE_BATCH {
                return Ok(total);
            }
        }
    }
}

fn attempt_json(a: &AttemptRecord) -> Result<String, LedgerError> {
    serde_json::to_string(a).map_err(|e| LedgerError::Corrupt(e.to_string()))
}

fn parse<T: std::str::FromStr + Default>(v: Option<&String>) -> T {
    v.and_then(|s| s.parse().ok()).unwrap_or_default()
}

fn outcome_from(s: &str) -> Result<Outcome, LedgerError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| LedgerError::Corrupt(format!("unknown outcome {s:?}")))
}

fn class_from(s: &str) -> Result<AttemptClass, LedgerError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| LedgerError::Corrupt(format!("unknown attempt class {s:?}")))
}

fn value_string(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Double(d) => d.to_string(),
        _ => String::new(),
    }
}

fn value_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => value_string(other).parse().unwrap_or_default(),
    }
}

/// Leases as `lease.lua` and `held.lua` return them: groups of run_id,
/// token, attempt, question text, expiry.
fn grants(reply: &[Value]) -> Vec<LeaseGrant> {
    reply
        .chunks_exact(5)
        .map(|g| {
            let run_id = value_string(&g[0]);
            let (q, arm, repeat) = split_run_id(&run_id);
            LeaseGrant {
                question_id: q.to_owned(),
                arm_id: arm.to_owned(),
                repeat,
                token: value_i64(&g[1]) as u64,
                attempt: value_i64(&g[2]) as u32,
                question_text: value_string(&g[3]),
                expires_ms: value_i64(&g[4]),
                run_id,
            }
        })
        .collect()
}

#[async_trait]
impl Ledger for RedisLedger {
    fn round_trips(&self) -> Option<u64> {
        Some(self.round_trips.load(std::sync::atomic::Ordering::Relaxed))
    }

    async fn seed(
        &self,
        header: &PlanHeader,
        questions: &[(String, String)],
        order: &[String],
        now_ms: i64,
    ) -> Result<SeedOutcome, LedgerError> {
        let meta = self.meta();
        let (seeded, found, found_cohort): (Option<String>, Option<String>, Option<String>) = ::redis::cmd("HMGET")
            .arg(&meta)
            .arg("seeded")
            .arg("manifest_sha256")
            .arg("cohort")
            .query_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        if let Some(found) = found {
            if found != header.manifest_sha256 {
                return Err(LedgerError::ManifestMismatch {
                    found_cohort: found_cohort.unwrap_or_default(),
                    found,
                    expected: header.manifest_sha256.clone(),
                });
            }
            if seeded.as_deref() == Some("1") {
                return Ok(SeedOutcome::AlreadySeeded);
            }
        }
        // Claim the ledger for this manifest, then write the plan. Until
        // `seeded` is set no run can be leased, so an interrupted seed is
        // simply done again.
        let header_json = serde_json::to_string(header).map_err(|e| LedgerError::Corrupt(e.to_string()))?;
        let r = &header.retry;
        let arm_ids: Vec<&str> = header.arms.iter().map(|a| a.id.as_str()).collect();
        let mut p = ::redis::pipe();
        p.atomic()
            .hset_multiple(
                &meta,
                &[
                    ("cohort", header.cohort.clone()),
                    ("manifest_sha256", header.manifest_sha256.clone()),
                    ("header", header_json),
                    ("window_ms", header.window_ms.to_string()),
                    ("max_attempts", r.max_attempts.to_string()),
                    ("initial_backoff_ms", r.initial_backoff_ms.to_string()),
                    ("max_backoff_ms", r.max_backoff_ms.to_string()),
                    ("max_total_ms", (r.max_total_secs.saturating_mul(1000)).to_string()),
                    ("planned", order.len().to_string()),
                    ("finished", "0".to_owned()),
                    ("discarded", "0".to_owned()),
                    ("rounds", header.rounds.max(1).to_string()),
                    ("round_every_ms", header.round_every_ms.max(0).to_string()),
                    ("rounds_closed", "0".to_owned()),
                ],
            )
            .ignore()
            .del(self.key("order"))
            .ignore()
            .del(self.key("rounds"))
            .ignore()
            .del(self.key("counts"))
            .ignore()
            .del(self.key("arms"))
            .ignore()
            .hset(self.key("arms"), "order", serde_json::to_string(&arm_ids).unwrap_or_default())
            .ignore();
        for arm in &header.arms {
            let versions = serde_json::to_string(&[&arm.pinned_version]).unwrap_or_default();
            p.hset(self.key("arms"), format!("{}|cap", arm.id), arm.concurrency)
                .ignore()
                .hset(self.key("arms"), format!("{}|leased", arm.id), 0)
                .ignore()
                .hset(self.key("arms"), format!("{}|versions", arm.id), versions)
                .ignore()
                .del(self.key(&format!("pending:{}", arm.id)))
                .ignore();
            if arm.manual {
                p.hset(self.key("arms"), format!("{}|manual", arm.id), 1).ignore();
            }
        }
        p.query_async::<()>(&mut self.rt()).await.map_err(redis_err)?;

        for chunk in questions.chunks(SEED_BATCH) {
            let mut p = ::redis::pipe();
            p.hset_multiple(self.key("questions"), chunk).ignore();
            p.query_async::<()>(&mut self.rt()).await.map_err(redis_err)?;
        }
        let mut planned_per_arm: BTreeMap<&str, u64> = BTreeMap::new();
        for (start, chunk) in order.chunks(SEED_BATCH).enumerate().map(|(i, c)| (i * SEED_BATCH, c)) {
            let mut p = ::redis::pipe();
            for (offset, run_id) in chunk.iter().enumerate() {
                let position = start + offset;
                let (q, arm, rep) = split_run_id(run_id);
                *planned_per_arm.entry(arm).or_default() += 1;
                p.hset_multiple(
                    self.key(&format!("run:{run_id}")),
                    &[
                        ("pos", position.to_string()),
                        ("arm", arm.to_owned()),
                        ("q", q.to_owned()),
                        ("rep", rep.to_string()),
                        ("state", "pending".to_owned()),
                        ("attempts", "0".to_owned()),
                    ],
                )
                .ignore();
                // A later round waits in `rounds` until it opens (lease.lua).
                if rep > 1 && header.round_every_ms > 0 {
                    p.zadd(self.key("rounds"), run_id, rep).ignore();
                } else {
                    p.zadd(self.key(&format!("pending:{arm}")), run_id, position).ignore();
                }
            }
            p.rpush(self.key("order"), chunk).ignore();
            p.query_async::<()>(&mut self.rt()).await.map_err(redis_err)?;
        }
        let mut p = ::redis::pipe();
        p.atomic();
        for (arm, n) in planned_per_arm {
            p.hset(self.key("counts"), format!("a|{arm}|planned"), n).ignore();
        }
        p.hset(&meta, "seeded", "1").ignore();
        p.cmd("XADD")
            .arg(self.key("events"))
            .arg("*")
            .arg("at_ms")
            .arg(now_ms)
            .arg("kind")
            .arg("seeded")
            .arg("run_id")
            .arg("")
            .arg("detail")
            .arg(format!("{} runs from manifest {}", order.len(), header.manifest_sha256))
            .ignore();
        p.query_async::<()>(&mut self.rt()).await.map_err(redis_err)?;
        Ok(SeedOutcome::Seeded)
    }

    async fn lease_scoped(
        &self,
        worker: &str,
        scope: LeaseScope<'_>,
        max: u32,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<LeaseBatch, LedgerError> {
        let (scope, scope_arm) = match scope {
            LeaseScope::Automatic => ("auto", ""),
            LeaseScope::Manual(arm) => ("manual", arm),
        };
        let reply: Vec<Value> = self
            .scripts
            .lease
            .key(self.meta())
            .arg(now_ms)
            .arg(max)
            .arg(ttl_ms)
            .arg(worker)
            .arg(CLOSE_BATCH)
            .arg(scope)
            .arg(scope_arm)
            .invoke_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        let closed = reply.first().map(value_i64) == Some(1);
        let mut done = reply.get(1).map(value_i64) == Some(1);
        if closed && !done {
            // The window closed with more pending runs than one call closes.
            self.close_window_if_due(now_ms).await?;
            done = self.status().await?.done();
        }
        let leases = grants(reply.get(3..).unwrap_or_default());
        Ok(LeaseBatch { leases, closed: closed || done, done })
    }

    async fn leases_held(&self, worker: &str) -> Result<Vec<LeaseGrant>, LedgerError> {
        let reply: Vec<Value> =
            self.scripts.held.key(self.meta()).arg(worker).invoke_async(&mut self.rt()).await.map_err(redis_err)?;
        Ok(grants(&reply))
    }

    async fn heartbeat(
        &self,
        _worker: &str,
        leases: &[LeaseRef],
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Vec<LeaseRef>, LedgerError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = self.scripts.heartbeat.key(self.meta());
        inv.arg(now_ms).arg(ttl_ms);
        for l in leases {
            inv.arg(&l.run_id).arg(l.token);
        }
        let lost: Vec<String> = inv.invoke_async(&mut self.rt()).await.map_err(redis_err)?;
        Ok(lost
            .chunks_exact(2)
            .map(|p| LeaseRef { run_id: p[0].clone(), token: p[1].parse().unwrap_or_default() })
            .collect())
    }

    async fn report_attempt(
        &self,
        worker: &str,
        lease: &LeaseRef,
        attempt: &AttemptRecord,
        now_ms: i64,
    ) -> Result<AttemptVerdict, LedgerError> {
        let reply: Vec<Value> = self
            .scripts
            .attempt
            .key(self.meta())
            .arg(now_ms)
            .arg(&lease.run_id)
            .arg(lease.token)
            .arg(worker)
            .arg(attempt_json(attempt)?)
            .invoke_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        match reply.first().map(value_i64) {
            Some(1) => Ok(AttemptVerdict::Retry { not_before_ms: reply.get(1).map(value_i64).unwrap_or(now_ms) }),
            Some(2) => Ok(AttemptVerdict::Final(outcome_from(&reply.get(1).map(value_string).unwrap_or_default())?)),
            Some(3) => Ok(AttemptVerdict::ArmPaused),
            _ => Ok(AttemptVerdict::Stale),
        }
    }

    async fn finish(
        &self,
        worker: &str,
        lease: &LeaseRef,
        result: &RunResult,
        now_ms: i64,
    ) -> Result<bool, LedgerError> {
        let accepted = self.finish_many(worker, &[(lease.clone(), result.clone())], now_ms).await?;
        Ok(accepted.first().copied().unwrap_or(false))
    }

    async fn finish_many(
        &self,
        worker: &str,
        results: &[(LeaseRef, RunResult)],
        now_ms: i64,
    ) -> Result<Vec<bool>, LedgerError> {
        if results.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = self.scripts.finish.key(self.meta());
        inv.arg(now_ms).arg(worker);
        for (lease, result) in results {
            inv.arg(&lease.run_id)
                .arg(lease.token)
                .arg(result.outcome.as_str())
                .arg(&result.reason)
                .arg(&result.record_sha256)
                .arg(result.observed_version.as_deref().unwrap_or_default())
                .arg(if result.observed_version.is_some() { "1" } else { "0" })
                .arg(attempt_json(&result.attempt)?);
        }
        let accepted: Vec<i64> = inv.invoke_async(&mut self.rt()).await.map_err(redis_err)?;
        Ok(accepted.into_iter().map(|a| a == 1).collect())
    }

    async fn release(&self, worker: &str, lease: &LeaseRef, now_ms: i64) -> Result<bool, LedgerError> {
        let released: i64 = self
            .scripts
            .release
            .key(self.meta())
            .arg(now_ms)
            .arg(&lease.run_id)
            .arg(lease.token)
            .arg(worker)
            .invoke_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        Ok(released == 1)
    }

    async fn expire(&self, now_ms: i64) -> Result<u64, LedgerError> {
        let mut total = 0;
        loop {
            let n: u64 = self
                .scripts
                .expire
                .key(self.meta())
                .arg(now_ms)
                .arg(EXPIRE_BATCH)
                .invoke_async(&mut self.rt())
                .await
                .map_err(redis_err)?;
            total += n;
            if (n as usize) < EXPIRE_BATCH {
                return Ok(total);
            }
        }
    }

    async fn close_window_if_due(&self, now_ms: i64) -> Result<u64, LedgerError> {
        self.close_all(now_ms, "window", "").await
    }

    async fn pause_arm(&self, arm: &str, reason: &str, now_ms: i64) -> Result<(), LedgerError> {
        self.scripts
            .arm
            .key(self.meta())
            .arg(now_ms)
            .arg("pause")
            .arg(arm)
            .arg(reason)
            .arg("")
            .invoke_async::<i64>(&mut self.rt())
            .await
            .map_err(redis_err)?;
        Ok(())
    }

    async fn resume_arm(
        &self,
        arm: &str,
        acknowledgement: &str,
        accept_version: Option<&str>,
        now_ms: i64,
    ) -> Result<(), LedgerError> {
        self.scripts
            .arm
            .key(self.meta())
            .arg(now_ms)
            .arg("resume")
            .arg(arm)
            .arg(acknowledgement)
            .arg(accept_version.unwrap_or_default())
            .invoke_async::<i64>(&mut self.rt())
            .await
            .map_err(redis_err)?;
        Ok(())
    }

    async fn abort(&self, reason: &str, now_ms: i64) -> Result<u64, LedgerError> {
        self.close_all(now_ms, "abort", reason).await
    }

    async fn status(&self) -> Result<Status, LedgerError> {
        let (meta, counts, arms, leased): (
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            u64,
        ) = ::redis::pipe()
            .hgetall(self.meta())
            .hgetall(self.key("counts"))
            .hgetall(self.key("arms"))
            .zcard(self.key("leases"))
            .query_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        if meta.get("seeded").map(String::as_str) != Some("1") {
            return Err(LedgerError::NotSeeded);
        }
        let planned: u64 = parse(meta.get("planned"));
        let finished: u64 = parse(meta.get("finished"));
        let mut by_outcome = BTreeMap::new();
        let mut attempts_by_class = BTreeMap::new();
        for (k, v) in &counts {
            let n: u64 = v.parse().unwrap_or_default();
            if n == 0 {
                continue;
            }
            if let Some(o) = k.strip_prefix("o|") {
                by_outcome.insert(outcome_from(o)?, n);
            } else if let Some(c) = k.strip_prefix("c|") {
                attempts_by_class.insert(class_from(c)?, n);
            }
        }
        let order: Vec<String> = arms.get("order").and_then(|o| serde_json::from_str(o).ok()).unwrap_or_default();
        let mut arm_status = Vec::new();
        for id in order {
            let mut s = ArmStatus { id: id.clone(), ..ArmStatus::default() };
            s.planned = parse(counts.get(&format!("a|{id}|planned")));
            s.leased = parse(arms.get(&format!("{id}|leased")));
            s.paused = arms.get(&format!("{id}|paused")).cloned();
            s.manual = arms.contains_key(&format!("{id}|manual"));
            s.held_until_ms = arms.get(&format!("{id}|hold")).and_then(|v| v.parse().ok());
            s.accepted_versions =
                arms.get(&format!("{id}|versions")).and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default();
            for o in Outcome::ALL {
                let n: u64 = parse(counts.get(&format!("a|{id}|{o}")));
                if n > 0 {
                    s.by_outcome.insert(o, n);
                }
            }
            arm_status.push(s);
        }
        Ok(Status {
            cohort: meta.get("cohort").cloned().unwrap_or_default(),
            manifest_sha256: meta.get("manifest_sha256").cloned().unwrap_or_default(),
            planned,
            pending: planned.saturating_sub(finished).saturating_sub(leased),
            leased,
            finished,
            by_outcome,
            attempts_by_class,
            arms: arm_status,
            window_start_ms: meta.get("window_start").and_then(|v| v.parse().ok()),
            window_end_ms: meta.get("window_end").and_then(|v| v.parse().ok()),
            aborted: meta.get("aborted").cloned(),
            discarded: parse(meta.get("discarded")),
        })
    }

    async fn runs(&self) -> Result<Vec<RunRow>, LedgerError> {
        let ids: Vec<String> = self.rt().lrange(self.key("order"), 0, -1).await.map_err(redis_err)?;
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(1000) {
            let mut p = ::redis::pipe();
            for id in chunk {
                p.hgetall(self.key(&format!("run:{id}")));
            }
            let hashes: Vec<BTreeMap<String, String>> = p.query_async(&mut self.rt()).await.map_err(redis_err)?;
            for (id, h) in chunk.iter().zip(hashes) {
                let state = match h.get("state").map(String::as_str) {
                    Some("pending") => RunStateKind::Pending,
                    Some("leased") => RunStateKind::Leased,
                    Some("final") => RunStateKind::Final,
                    other => return Err(LedgerError::Corrupt(format!("run {id} has state {other:?}"))),
                };
                rows.push(RunRow {
                    run_id: id.clone(),
                    position: parse(h.get("pos")),
                    arm_id: h.get("arm").cloned().unwrap_or_default(),
                    state,
                    attempts: parse(h.get("attempts")),
                    outcome: h.get("outcome").map(|o| outcome_from(o)).transpose()?,
                    reason: h.get("reason").cloned().unwrap_or_default(),
                    record_sha256: h.get("record").cloned().unwrap_or_default(),
                    observed_version: h.get("version").cloned(),
                    started_ms: parse(h.get("started")),
                    ended_ms: parse(h.get("ended")),
                });
            }
        }
        Ok(rows)
    }

    async fn attempts(&self, run_id: &str) -> Result<Vec<AttemptRecord>, LedgerError> {
        let raw: Vec<String> =
            self.rt().lrange(self.key(&format!("attempts:{run_id}")), 0, -1).await.map_err(redis_err)?;
        raw.iter().map(|j| serde_json::from_str(j).map_err(|e| LedgerError::Corrupt(e.to_string()))).collect()
    }

    async fn discarded(&self) -> Result<Vec<DiscardedReport>, LedgerError> {
        let raw: Vec<String> = self.rt().lrange(self.key("discarded"), 0, -1).await.map_err(redis_err)?;
        raw.iter().map(|j| serde_json::from_str(j).map_err(|e| LedgerError::Corrupt(e.to_string()))).collect()
    }

    async fn events(&self, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        let reply: Vec<(String, BTreeMap<String, String>)> = ::redis::cmd("XREVRANGE")
            .arg(self.key("events"))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut self.rt())
            .await
            .map_err(redis_err)?;
        Ok(reply
            .into_iter()
            .rev()
            .map(|(_, f)| LedgerEvent {
                at_ms: parse(f.get("at_ms")),
                kind: f.get("kind").cloned().unwrap_or_default(),
                run_id: f.get("run_id").cloned().unwrap_or_default(),
                detail: f.get("detail").cloned().unwrap_or_default(),
            })
            .collect())
    }
}
